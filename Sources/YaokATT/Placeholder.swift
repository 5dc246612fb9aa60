// YaokATT
