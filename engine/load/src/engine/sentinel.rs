//! Redis Sentinel, the following part: when a load thread reconnects to a `redis+sentinel://`
//! target's primary, it first asks the Sentinels which address is primary now
//! (`SENTINEL get-master-addr-by-name <service>`, after `AUTH` with the Sentinels' password
//! when one is given), blocking with a short timeout, each Sentinel in order until one names
//! it — as redis-py's `Sentinel.master_for` does on each reconnect. Python resolves the
//! primary at the start (`engine.target_config`); this file only follows it afterwards.

use super::conn::read_some;
use super::stream::Stream;
use crate::config::{SentinelPlan, ServerAddr};
use std::io::Write;
use std::time::Duration;

/// Longest line or bulk string read from a Sentinel: an address fits many times over.
const MAX_FIELD: usize = 1024;

/// What a Sentinel said to `SENTINEL get-master-addr-by-name`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// The primary's `host:port` (`[v6]:port` for an IPv6 address).
    Primary(String),
    /// A nil reply: this Sentinel watches no service of that name.
    Unknown,
    /// An error reply (`-IDONTKNOW …`, `-NOAUTH …`), as text.
    Refused(String),
}

/// The request: `AUTH password` (when given), then the question.
pub(super) fn request(plan: &SentinelPlan) -> Vec<u8> {
    let mut out = Vec::new();
    let mut command = |args: &[&[u8]]| {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    };
    if let Some(password) = &plan.password {
        command(&[b"AUTH", password.as_bytes()]);
    }
    command(&[
        b"SENTINEL",
        b"get-master-addr-by-name",
        plan.service.as_bytes(),
    ]);
    out
}

/// One line at `buf[at..]`: its text and where the next one starts; `Ok(None)`: incomplete.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, String> {
    let rest = &buf[at.min(buf.len())..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(n) if n <= MAX_FIELD => Ok(Some((&rest[..n], at + n + 2))),
        Some(_) => Err("reply line too long".into()),
        None if rest.len() > MAX_FIELD + 2 => Err("reply line too long".into()),
        None => Ok(None),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The reply to `AUTH`: `Ok(Some((None, end)))` for `+OK`, `Some((Some(error), end))` for a
/// refusal; `Ok(None)`: incomplete.
pub(super) fn parse_auth(buf: &[u8]) -> Result<Option<(Option<String>, usize)>, String> {
    let Some((l, end)) = line(buf, 0)? else {
        return Ok(None);
    };
    match l.first() {
        Some(b'+') => Ok(Some((None, end))),
        Some(b'-') => Ok(Some((Some(text(&l[1..])), end))),
        _ => Err(format!("unexpected reply to AUTH: {:?}", text(l))),
    }
}

/// The reply to `SENTINEL get-master-addr-by-name`: `*2` of host and port, nil (`*-1`, or
/// RESP3's `_`), or an error; `Ok(None)`: incomplete.
pub(super) fn parse_master_addr(buf: &[u8]) -> Result<Option<(Answer, usize)>, String> {
    let Some((head, mut at)) = line(buf, 0)? else {
        return Ok(None);
    };
    match head {
        b"*-1" | b"$-1" | b"_" => return Ok(Some((Answer::Unknown, at))),
        [b'-', msg @ ..] => return Ok(Some((Answer::Refused(text(msg)), at))),
        b"*2" => {}
        _ => return Err(format!("unexpected reply: {:?}", text(head))),
    }
    let mut fields = Vec::with_capacity(2);
    for _ in 0..2 {
        let Some((len, next)) = line(buf, at)? else {
            return Ok(None);
        };
        let n = match len {
            [b'$', digits @ ..] => std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<usize>().ok())
                .filter(|&n| n <= MAX_FIELD)
                .ok_or_else(|| format!("bad bulk length {:?}", text(len)))?,
            _ => return Err(format!("expected a bulk string, not {:?}", text(len))),
        };
        if buf.len() < next + n + 2 {
            return Ok(None);
        }
        if &buf[next + n..next + n + 2] != b"\r\n" {
            return Err("bulk string without its CRLF".into());
        }
        fields.push(text(&buf[next..next + n]));
        at = next + n + 2;
    }
    let (host, port) = (&fields[0], &fields[1]);
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("not an address: {host:?} {port:?}"));
    }
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(Some((Answer::Primary(addr), at)))
}

/// Asks one Sentinel.
fn ask_one(plan: &SentinelPlan, i: usize, timeout: Duration) -> Result<Answer, String> {
    let name = &plan.names[i];
    let mut s = Stream::connect(&plan.addrs[i], timeout, None)
        .map_err(|e| format!("cannot connect to sentinel {name}: {e}"))?;
    s.set_timeouts(Some(timeout)).map_err(|e| e.to_string())?;
    s.write_all(&request(plan))
        .map_err(|e| format!("sentinel {name}: cannot send: {e}"))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    let mut authed = plan.password.is_none();
    loop {
        if !authed {
            if let Some((refused, end)) =
                parse_auth(&buf).map_err(|m| format!("sentinel {name}: {m}"))?
            {
                if let Some(m) = refused {
                    // The password itself is never part of a message.
                    return Err(format!(
                        "sentinel {name} refused the sentinel password: {m}"
                    ));
                }
                buf.drain(..end);
                authed = true;
                continue;
            }
        } else if let Some((answer, _)) =
            parse_master_addr(&buf).map_err(|m| format!("sentinel {name}: {m}"))?
        {
            return Ok(answer);
        }
        let n = read_some(&mut s, &mut chunk).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                "sentinel {name}: no reply within {} ms",
                timeout.as_millis()
            ),
            _ => format!("sentinel {name}: no reply: {e}"),
        })?;
        if n == 0 {
            return Err(format!("sentinel {name} closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The primary the Sentinels name now (`ServerAddr` and `host:port`): the first Sentinel
/// that names one is believed. `Err`: one line saying what each Sentinel answered.
pub(super) fn ask(plan: &SentinelPlan, timeout: Duration) -> Result<(ServerAddr, String), String> {
    let mut why = Vec::new();
    for i in 0..plan.addrs.len() {
        match ask_one(plan, i, timeout) {
            Ok(Answer::Primary(name)) => match ServerAddr::parse(&name) {
                Ok(addr) => return Ok((addr, name)),
                Err(m) => why.push(format!("{}: {m}", plan.names[i])),
            },
            Ok(Answer::Unknown) => why.push(format!("{}: unknown service", plan.names[i])),
            Ok(Answer::Refused(m)) => why.push(format!("{}: {m}", plan.names[i])),
            Err(m) => why.push(m),
        }
    }
    Err(format!(
        "the Sentinels name no primary for {:?} ({})",
        plan.service,
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn plan(addrs: &[String], password: Option<&str>) -> SentinelPlan {
        SentinelPlan {
            addrs: addrs
                .iter()
                .map(|a| ServerAddr::parse(a).unwrap())
                .collect(),
            names: addrs.to_vec(),
            service: "mymaster".into(),
            password: password.map(String::from),
        }
    }

    #[test]
    fn parses_the_address_nil_and_errors() {
        let reply = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n";
        assert_eq!(
            parse_master_addr(reply).unwrap(),
            Some((Answer::Primary("127.0.0.1:6380".into()), reply.len()))
        );
        // every truncation asks for more
        for n in 0..reply.len() {
            assert_eq!(parse_master_addr(&reply[..n]).unwrap(), None, "{n}");
        }
        let v6 = b"*2\r\n$3\r\n::1\r\n$4\r\n6380\r\n";
        assert!(matches!(
            parse_master_addr(v6).unwrap(),
            Some((Answer::Primary(a), _)) if a == "[::1]:6380"
        ));
        assert_eq!(
            parse_master_addr(b"*-1\r\n").unwrap(),
            Some((Answer::Unknown, 5))
        );
        assert!(matches!(
            parse_master_addr(b"-NOAUTH Authentication required.\r\n").unwrap(),
            Some((Answer::Refused(m), _)) if m == "NOAUTH Authentication required."
        ));
        assert!(parse_master_addr(b":1\r\n").is_err());
        assert!(parse_master_addr(b"*2\r\n$9\r\n127.0.0.1\r\n$2\r\nxx\r\n").is_err());
        assert!(parse_master_addr(&[b'a'; 2000]).is_err());
        assert_eq!(parse_auth(b"+OK\r\n").unwrap(), Some((None, 5)));
        assert_eq!(
            parse_auth(b"-WRONGPASS no\r\n").unwrap(),
            Some((Some("WRONGPASS no".into()), 15))
        );
    }

    /// A fake Sentinel on loopback: reads one request, answers `reply`, returns what it read.
    fn fake_sentinel(reply: &'static [u8]) -> (String, std::thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 512];
            while !got.ends_with(b"mymaster\r\n") {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(reply).unwrap();
            got
        });
        (addr, handle)
    }

    #[test]
    fn a_nil_reply_is_one_line_and_the_next_sentinel_is_asked() {
        let (unknown, a) = fake_sentinel(b"+OK\r\n*-1\r\n");
        let (knows, b) = fake_sentinel(b"+OK\r\n*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n");
        let p = plan(&[unknown, knows], Some("s3cret"));
        let (addr, name) = ask(&p, Duration::from_secs(2)).unwrap();
        assert_eq!(name, "127.0.0.1:6380");
        assert_eq!(addr, ServerAddr::parse("127.0.0.1:6380").unwrap());
        // the first one (nil: it does not know the service) was asked after AUTH
        let first = a.join().unwrap();
        assert!(first.starts_with(b"*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n"));
        assert!(first.ends_with(
            b"*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$8\r\nmymaster\r\n"
        ));
        b.join().unwrap();

        let (unknown, a) = fake_sentinel(b"*-1\r\n");
        let p = plan(std::slice::from_ref(&unknown), None);
        let err = ask(&p, Duration::from_secs(2)).unwrap_err();
        a.join().unwrap();
        assert_eq!(
            err,
            format!("the Sentinels name no primary for \"mymaster\" ({unknown}: unknown service)")
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn a_refused_password_is_named_never_shown() {
        let (addr, a) = fake_sentinel(b"-WRONGPASS invalid username-password pair\r\n");
        let p = plan(&[addr], Some("s3cret"));
        let err = ask(&p, Duration::from_secs(2)).unwrap_err();
        a.join().unwrap();
        assert!(
            err.contains("refused the sentinel password: WRONGPASS"),
            "{err}"
        );
        assert!(!err.contains("s3cret"));
    }
}
