//! A connection's byte stream: TCP, a Unix domain socket, or TLS over TCP. The I/O
//! backends work on the raw fd for the first two (read/write/send/recv behave alike on
//! both kinds of stream socket); TLS needs its records sealed and opened, which the epoll
//! backend does through [`Tls`] on the socket and io_uring in its buffers (`tlsbuf.rs`). The blocking connect and
//! handshake, the canaries and the owner of the fd use this type.

use crate::config::ServerAddr;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

/// A TLS session and its socket.
pub(crate) type Tls = StreamOwned<ClientConnection, TcpStream>;

/// A connected stream socket; dropping it closes the fd.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<Tls>),
}

impl Stream {
    /// Connects to `addr`, waiting at most `timeout` (a Unix socket connects at once or
    /// fails), and with `tls` completes the TLS handshake, blocking.
    pub(crate) fn connect(
        addr: &ServerAddr,
        timeout: Duration,
        tls: Option<(&Arc<ClientConfig>, &ServerName<'static>)>,
    ) -> std::io::Result<Stream> {
        match addr {
            ServerAddr::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, timeout)?;
                let _ = s.set_nodelay(true);
                match tls {
                    None => Ok(Stream::Tcp(s)),
                    Some((config, name)) => handshake(s, config, name, timeout),
                }
            }
            ServerAddr::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p)?)),
        }
    }

    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::Tls(t) => Some(&t.sock),
            Stream::Unix(_) => None,
        }
    }

    pub(crate) fn set_timeouts(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match (self, self.tcp()) {
            (_, Some(s)) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
            (Stream::Unix(s), None) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
            _ => unreachable!("only a Unix stream has no TCP socket"),
        }
    }

    pub(crate) fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match (self, self.tcp()) {
            (_, Some(s)) => s.set_nonblocking(on),
            (Stream::Unix(s), None) => s.set_nonblocking(on),
            _ => unreachable!("only a Unix stream has no TCP socket"),
        }
    }
}

/// The TLS handshake on a fresh TCP connection, blocking (each read and write within `timeout`).
fn handshake(
    mut sock: TcpStream,
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    timeout: Duration,
) -> std::io::Result<Stream> {
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let mut conn = ClientConnection::new(config.clone(), name.clone())
        .map_err(|e| std::io::Error::other(format!("TLS: {e}")))?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            // A certificate rustls refused is an InvalidData error holding the reason.
            let why = match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    format!("no reply within {} ms", timeout.as_millis())
                }
                std::io::ErrorKind::UnexpectedEof => {
                    "the server closed the connection (does it speak TLS?)".to_string()
                }
                _ => e.to_string(),
            };
            return Err(std::io::Error::new(
                e.kind(),
                format!("TLS handshake failed: {why}"),
            ));
        }
    }
    Ok(Stream::Tls(Box::new(StreamOwned::new(conn, sock))))
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(t) => t.sock.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tls(t) => t.flush(),
            _ => Ok(()),
        }
    }
}
