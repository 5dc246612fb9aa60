// YaokWire
