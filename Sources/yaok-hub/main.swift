print("yaok-hub")
