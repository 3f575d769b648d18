// WebTorrent's bittorrent-dht on loopback, for the tests (tests/webtorrent_dht.py starts it).
//
// One DHT node per address given, each on a port of its own choosing, none bootstrapped from
// the public routers (`bootstrap: false`): every node is put in every other's routing table
// directly. Once all listen and know each other it prints one JSON line,
// {"nodes": [[ip, port, node id hex], ...]}, then answers one JSON line per command line read:
//
//   {"announce": hex, "peers": [[node, port], ...]}  node `node` announces `hex` with `port`
//       (BEP 5 announce_peer to the nodes its lookup found); answers
//       {"stored": [nodes that took each announce], "errors": [message or null, ...]}
//   {"ping": [ip, port], "from": node}  node `from` pings that address; {"answered": bool, "error": ...}
//   {"stats": true}  what the nodes saw: the queries each source address sent, by method, with
//       how many carried BEP 43's "ro" flag and how many BEP 33's "scrape" (which bittorrent-dht
//       does not implement); each peer an announce_peer stored (node, info-hash, address, port);
//       each node's stored peers by info-hash; each node's routing table; and every warning or
//       error the nodes raised (a packet they could not read, a reply they did not expect).
//
// Stops when its standard input closes (the test that started it is gone) or on SIGTERM; exits 1
// at once if a node cannot listen.
//
//   node webtorrent_dht.mjs ip [ip ...]
import DHT from 'bittorrent-dht'

const ips = process.argv.slice(2)
if (!ips.length) {
  process.stderr.write('usage: node webtorrent_dht.mjs ip [ip ...]\n')
  process.exit(2)
}

const queries = {} // source "ip" -> {method: count, ro: count, scrape: count}
const announces = [] // {node, info_hash, host, port}: a peer an announce_peer stored on node
const problems = [] // {node, kind, message}
let listening = 0 // nodes listening so far

const dhts = ips.map((ip, i) => {
  const dht = new DHT({ bootstrap: false })
  // k-rpc calls a socket error other than EACCES and EADDRINUSE (EADDRNOTAVAIL, say) a warning:
  // before every node listens, either means a node that cannot, and no network to print.
  for (const kind of ['warning', 'error']) {
    dht.on(kind, err => {
      problems.push({ node: i, kind, message: err.message })
      process.stderr.write(`bittorrent-dht ${ip} ${kind}: ${err.message}\n`)
      if (listening < ips.length) process.exit(1)
    })
  }
  // k-rpc's event for every query read, whatever its method (the DHT answers the ones it knows).
  dht._rpc.on('query', (query, peer) => {
    const method = query.q ? query.q.toString() : '(none)'
    const seen = queries[peer.address] || (queries[peer.address] = { ro: 0, scrape: 0 })
    seen[method] = (seen[method] || 0) + 1
    if (query.ro === 1) seen.ro++
    if (query.a && query.a.scrape === 1) seen.scrape++ // BEP 33, which bittorrent-dht does not implement
  })
  // Every peer an announce_peer stored: its address and the port it announced.
  dht.on('announce', (peer, infoHash) => {
    announces.push({ node: i, info_hash: Buffer.from(infoHash).toString('hex'), host: peer.host, port: peer.port })
  })
  return dht
})

function send (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function peersOf (dht) {
  // record-cache (its fresh and stale generations): info-hash hex -> compact peers, 6 bytes each.
  const out = {}
  const keys = new Set([...dht._peers._fresh.records.keys(), ...dht._peers._stale.records.keys()])
  for (const key of keys) out[key] = decode(dht._peers.get(key))
  return out
}

function decode (compact) {
  return compact.map(b => [`${b[0]}.${b[1]}.${b[2]}.${b[3]}`, b.readUInt16BE(4)])
}

function stats () {
  return {
    queries,
    announces,
    problems,
    peers: dhts.map(peersOf),
    tables: dhts.map(d => d.nodes.toArray().map(n => [n.host, n.port]))
  }
}

function announce (cmd, reply) {
  const stored = new Array(cmd.peers.length).fill(0)
  const errors = new Array(cmd.peers.length).fill(null)
  let left = cmd.peers.length
  if (!left) return reply({ stored, errors })
  cmd.peers.forEach(([node, port], k) => {
    dhts[node].announce(cmd.announce, port, (err, n) => {
      if (err) errors[k] = err.message
      stored[k] = n || 0
      if (!--left) reply({ stored, errors })
    })
  })
}

function ping (cmd, reply) {
  const [host, port] = cmd.ping
  dhts[cmd.from || 0]._rpc.query({ host, port }, { q: 'ping' }, err => {
    reply({ answered: !err, error: err ? err.message : null })
  })
}

function command (line) {
  let cmd
  try {
    cmd = JSON.parse(line)
  } catch (err) {
    return send({ error: `not JSON: ${err.message}` })
  }
  if (cmd.announce) return announce(cmd, send)
  if (cmd.ping) return ping(cmd, send)
  if (cmd.stats) return send(stats())
  send({ error: `unknown command ${line}` })
}

let stopping = false
function stop () {
  if (stopping) return
  stopping = true
  let left = dhts.length
  for (const dht of dhts) dht.destroy(() => { if (!--left) process.exit(0) })
  setTimeout(() => process.exit(0), 2000).unref()
}

let pending = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', chunk => {
  pending += chunk
  let nl
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl).trim()
    pending = pending.slice(nl + 1)
    if (line) command(line)
  }
})
process.stdin.on('end', stop)
process.stdin.on('error', stop)
process.on('SIGTERM', stop)
process.on('SIGINT', stop)

// Each node on its own address, so the peers its announces store are that address's; once all
// listen, each is told of every other (id, address, port) and the routing tables are complete.
dhts.forEach((dht, i) => {
  dht.listen(0, ips[i], () => {
    if (++listening < dhts.length) return
    const nodes = dhts.map((d, j) => [ips[j], d.address().port, d.nodeId.toString('hex')])
    dhts.forEach((d, j) => {
      nodes.forEach(([host, port], k) => {
        if (k !== j) d.addNode({ host, port, id: dhts[k].nodeId })
      })
    })
    send({ nodes })
  })
})
