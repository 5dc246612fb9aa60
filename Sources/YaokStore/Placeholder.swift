// YaokStore
