// YaokHubCore
