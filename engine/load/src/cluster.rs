//! Redis Cluster, the pure parts: a key's hash slot (CRC16/XMODEM of the key, or of its
//! `{hash tag}`, modulo 16384), the `MOVED`/`ASK` redirections a node answers with, and
//! the `CLUSTER SLOTS` reply that gives the slot map. The connecting side (asking a seed
//! for the map) is `engine/topology.rs`; routing and redirects are the worker's.

/// Hash slots in a Redis Cluster.
pub const SLOTS: usize = 16384;
/// A slot no primary serves (the map had a hole): its keys go to the first primary, which
/// answers with an error that is counted.
pub const UNOWNED: u16 = u16::MAX;

static CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), the cluster's key hash.
pub fn crc16(data: &[u8]) -> u16 {
    let mut c = 0u16;
    for &b in data {
        c = (c << 8) ^ CRC16_TABLE[((c >> 8) as u8 ^ b) as usize];
    }
    c
}

/// The hash slot of `key`: only the part between the first `{` and the next `}` is
/// hashed when that part is not empty (a hash tag), else the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) & (SLOTS as u16 - 1)
}

/// A node's `MOVED <slot> <host:port>` (the slot lives there now) or `ASK <slot> <host:port>`
/// (ask there once, behind `ASKING`: the slot is being migrated).
#[derive(Debug, PartialEq, Eq)]
pub struct Redirect<'a> {
    pub ask: bool,
    pub slot: u16,
    pub addr: &'a str,
}

/// Reads an error reply's text (without its `-`) as a redirection, if it is one.
pub fn parse_redirect(msg: &[u8]) -> Option<Redirect<'_>> {
    let text = std::str::from_utf8(msg).ok()?;
    let mut parts = text.split(' ');
    let ask = match parts.next()? {
        "MOVED" => false,
        "ASK" => true,
        _ => return None,
    };
    let slot: u16 = parts.next()?.parse().ok()?;
    let addr = parts.next()?;
    if slot as usize >= SLOTS || addr.is_empty() || parts.next().is_some() {
        return None;
    }
    Some(Redirect { ask, slot, addr })
}

/// `host:port` as the engine's server address (`[host]:port` for IPv6).
pub fn address(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One range of the slot map: `first..=last` served by the primary at `addr`, which the
/// replicas at `replicas` copy (in the order `CLUSTER SLOTS` names them).
#[derive(Debug, PartialEq, Eq)]
pub struct SlotRange {
    pub first: u16,
    pub last: u16,
    pub addr: String,
    pub replicas: Vec<String>,
}

enum Node {
    Int(i64),
    Str(String),
    Arr(Vec<Node>),
    Nil,
}

/// A whole RESP value (the reply is complete: `proto::parse` found its end first).
fn node(buf: &[u8], pos: &mut usize, depth: usize) -> Result<Node, String> {
    let rest = buf.get(*pos..).ok_or("truncated reply")?;
    let end = rest
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or("truncated reply")?;
    let line = &rest[1..end];
    let t = *rest.first().ok_or("truncated reply")?;
    *pos += end + 2;
    let text = String::from_utf8_lossy(line).into_owned();
    let int = |s: &str| s.parse::<i64>().map_err(|_| format!("bad length {s:?}"));
    match t {
        b'+' => Ok(Node::Str(text)),
        b'-' => Err(format!("the seed answered: {text}")),
        b':' => Ok(Node::Int(int(&text)?)),
        b'_' => Ok(Node::Nil),
        b'$' => {
            let n = int(&text)?;
            if n < 0 {
                return Ok(Node::Nil);
            }
            let n = n as usize;
            let data = buf.get(*pos..*pos + n).ok_or("truncated bulk string")?;
            *pos += n + 2;
            Ok(Node::Str(String::from_utf8_lossy(data).into_owned()))
        }
        b'*' | b'~' => {
            let n = int(&text)?;
            if n < 0 {
                return Ok(Node::Nil);
            }
            if depth > 4 || n as usize > buf.len() {
                return Err("CLUSTER SLOTS reply nested too deep or too long".into());
            }
            (0..n)
                .map(|_| node(buf, pos, depth + 1))
                .collect::<Result<_, _>>()
                .map(Node::Arr)
        }
        _ => Err(format!(
            "unexpected RESP type {:?} in CLUSTER SLOTS",
            t as char
        )),
    }
}

/// The slot ranges from a `CLUSTER SLOTS` reply: `[[first, last, [host, port, id, …],
/// [replica host, port, id, …]…], …]`, each with its primary and replicas. A node whose host
/// is empty (the node does not know its address) is reached at `seed_host`.
pub fn parse_slots(reply: &[u8], seed_host: &str) -> Result<Vec<SlotRange>, String> {
    let mut pos = 0;
    let Node::Arr(ranges) = node(reply, &mut pos, 0)? else {
        return Err("CLUSTER SLOTS did not answer with an array".into());
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let bad = || "CLUSTER SLOTS: a range is not [first, last, [host, port, …], …]".to_string();
        let Node::Arr(items) = r else {
            return Err(bad());
        };
        let (Some(Node::Int(first)), Some(Node::Int(last)), Some(Node::Arr(primary))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return Err(bad());
        };
        let node_addr = |entry: &[Node]| -> Result<String, String> {
            let host = match entry.first() {
                Some(Node::Str(h)) if !h.is_empty() && h != "?" => h.as_str(),
                Some(Node::Str(_)) | Some(Node::Nil) => seed_host,
                _ => return Err(bad()),
            };
            let Some(Node::Int(port)) = entry.get(1) else {
                return Err(bad());
            };
            Ok(address(host, *port))
        };
        let addr = node_addr(primary)?;
        let mut replicas = Vec::new();
        for r in &items[3..] {
            let Node::Arr(entry) = r else {
                return Err(bad());
            };
            replicas.push(node_addr(entry)?);
        }
        if !(0..SLOTS as i64).contains(first) || !(*first..SLOTS as i64).contains(last) {
            return Err(format!(
                "CLUSTER SLOTS: range {first}..{last} is outside 0..16383"
            ));
        }
        out.push(SlotRange {
            first: *first as u16,
            last: *last as u16,
            addr,
            replicas,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_spec() {
        // The reference value from the Redis Cluster specification (CRC16/XMODEM check value).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_follow_hash_tags() {
        // Values redis-server 7 gives for CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 0x31C3 & 16383);
        // Only the tag is hashed, so these share a slot ...
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"{user1000}.followers"),
            key_slot(b"{user1000}.following")
        );
        // ... the first '{' and the next '}' decide, and an empty tag hashes the whole key.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(
            key_slot(b"no-close{brace"),
            crc16(b"no-close{brace") & 16383
        );
    }

    #[test]
    fn redirects_are_read_and_other_errors_are_not() {
        assert_eq!(
            parse_redirect(b"MOVED 3999 127.0.0.1:6381"),
            Some(Redirect {
                ask: false,
                slot: 3999,
                addr: "127.0.0.1:6381"
            })
        );
        assert_eq!(
            parse_redirect(b"ASK 3999 [::1]:7000").map(|r| (r.ask, r.addr)),
            Some((true, "[::1]:7000"))
        );
        for bad in [
            &b"ERR unknown command"[..],
            b"MOVED",
            b"MOVED x 1.2.3.4:5",
            b"MOVED 16384 1.2.3.4:5",
            b"MOVED 1 ",
            b"MOVED 1 a b",
            b"CLUSTERDOWN Hash slot not served",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_redirect(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn slot_map_is_read_from_cluster_slots() {
        let reply = b"*2\r\n*4\r\n:0\r\n:8191\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n*0\r\n*4\r\n$9\r\n127.0.0.1\r\n:7003\r\n$2\r\nr1\r\n*0\r\n*3\r\n:8192\r\n:16383\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n";
        let ranges = parse_slots(reply, "10.0.0.1").unwrap();
        assert_eq!(
            ranges,
            vec![
                SlotRange {
                    first: 0,
                    last: 8191,
                    addr: "127.0.0.1:7000".into(),
                    replicas: vec!["127.0.0.1:7003".into()],
                },
                SlotRange {
                    first: 8192,
                    last: 16383,
                    addr: "10.0.0.1:7001".into(),
                    replicas: vec![],
                },
            ]
        );
        assert!(
            parse_slots(b"-ERR This instance has cluster support disabled\r\n", "h")
                .unwrap_err()
                .contains("cluster support disabled")
        );
        assert!(parse_slots(b"*1\r\n*2\r\n:0\r\n:9\r\n", "h").is_err());
        assert!(parse_slots(b"*1\r\n*3\r\n:9\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n", "h").is_err());
        assert!(parse_slots(b"*1\r\n*3\r\n:0\r\n", "h").is_err());
        assert_eq!(address("::1", 7000), "[::1]:7000");
    }

    #[test]
    fn replicas_are_read_from_cluster_slots() {
        // One range with two replicas: one that knows its address (IPv6), one that does not
        // (reached at the seed's host), each with the networking metadata of Redis 7.
        let reply = b"*1\r\n*5\r\n:0\r\n:16383\r\n\
            *4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$1\r\np\r\n*0\r\n\
            *4\r\n$3\r\n::1\r\n:7003\r\n$2\r\nr1\r\n*0\r\n\
            *3\r\n$0\r\n\r\n:7004\r\n$2\r\nr2\r\n";
        let ranges = parse_slots(reply, "10.0.0.1").unwrap();
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges[0].addr, "127.0.0.1:7000");
        assert_eq!(ranges[0].replicas, vec!["[::1]:7003", "10.0.0.1:7004"]);
        // A replica entry that is not [host, port, …] spoils the reply, as a primary's does.
        let bad = b"*1\r\n*4\r\n:0\r\n:9\r\n*2\r\n$1\r\nh\r\n:1\r\n:5\r\n";
        assert!(parse_slots(bad, "h").is_err());
        let bad = b"*1\r\n*4\r\n:0\r\n:9\r\n*2\r\n$1\r\nh\r\n:1\r\n*1\r\n$1\r\nh\r\n";
        assert!(parse_slots(bad, "h").is_err());
    }
}
