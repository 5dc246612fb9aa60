/// YaokRelayWebSocket: the relay's packets carried as binary WebSocket messages over TLS 1.3,
/// for uplinks that block UDP. The server side is a listener in `yaok-relay`; the client side
/// pins the relay certificate's SubjectPublicKeyInfo (SPKI) hash.
import NIOCore
import NIOSSL
import NIOWebSocket
