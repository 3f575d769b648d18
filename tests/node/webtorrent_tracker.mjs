// WebTorrent's bittorrent-tracker on loopback, for the tests (tests/webtorrent_tracker.py starts it).
//
// Its HTTP and UDP faces only: no WebSocket face, no stats page. Listens on the ports given
// (0: any free one; the UDP port also for its IPv6 socket, bound to ::1) and prints one JSON line,
// {"http": port, "udp": port}, once every socket listens. Stops when its standard input closes
// (the test that started it is gone) or on SIGTERM.
//
//   node webtorrent_tracker.mjs [http_port] [udp_port] [host]
import Server from 'bittorrent-tracker/server'

const [httpPort, udpPort] = [process.argv[2], process.argv[3]].map(p => Number(p || 0))
const host = process.argv[4] || '127.0.0.1'

const server = new Server({ udp: true, http: true, ws: false, stats: false })
server.on('error', err => {
  process.stderr.write(`bittorrent-tracker: ${err.message}\n`)
  process.exit(1)
})
// A request it refuses is the client's fault; it is logged for whoever reads the test's output.
server.on('warning', err => process.stderr.write(`bittorrent-tracker warning: ${err.message}\n`))
server.on('listening', () => {
  process.stdout.write(JSON.stringify({ http: server.http.address().port, udp: server.udp4.address().port }) + '\n')
})

let stopping = false
function stop () {
  if (stopping) return
  stopping = true
  server.close(() => process.exit(0))
}
process.stdin.on('end', stop)
process.stdin.on('error', stop)
process.stdin.resume()
process.on('SIGTERM', stop)
process.on('SIGINT', stop)

// Its UDP face binds an IPv4 and an IPv6 socket on one port number; the IPv6 one to ::1, since
// an IPv4 address cannot be an IPv6 socket's.
server.listen({ http: httpPort, udp: udpPort }, { http: host, udp: host, udp6: '::1' })
