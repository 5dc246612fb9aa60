print("yaok-relay")
