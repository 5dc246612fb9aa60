// BLE
