// YaokCrypto
