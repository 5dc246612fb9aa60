// YaokEndpoint
