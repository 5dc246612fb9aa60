// The kit is what a plugin imports: with it come the base types (hex, IP endpoints, backoff,
// clocks) and the link security (the Noise link session, TLV records, link frame types).
@_exported import YaokBase
@_exported import YaokLinkSecurity
