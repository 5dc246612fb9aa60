// The C ABI lives in include/yaok_plugin.h; this file keeps the target non-empty.
