//! The network seam: how a broker accepts connections ([`Listener`]) and
//! how it opens them to other brokers ([`Transport`]) for follower
//! fetches, transaction markers and KIP-890 verification. The binary uses
//! TCP ([`TcpTransport`], `tokio::net::TcpListener`); a simulation plugs in
//! an in-memory network it can cut (`strand_sim::live::net`), so the same
//! server, fetcher and coordinator code runs on both.
//!
//! The server side is generic (monomorphised: the client listener is the
//! hot path); the client side is a trait object, one boxed stream per
//! connection to another broker.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use strand_log::FileSlice;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest};

/// A byte stream to another host.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection the server accepted.
pub trait ServerConn: Stream + 'static {
    /// Resolves once bytes can be read (or the peer closed), consuming
    /// nothing: cancel-safe, so a connection can wait for its next request
    /// and a timer at once.
    fn readable(&mut self) -> impl Future<Output = io::Result<()>> + Send + '_;

    /// Resolves once the peer has closed the connection (or it failed),
    /// consuming nothing; never, while a request it sent waits unread.
    /// Lets a connection that is not being read (a throttled one) notice
    /// that its client has gone.
    fn closed(&mut self) -> impl Future<Output = ()> + Send + '_;

    /// Writes a slice of a segment file (a fetch response's records). By
    /// default its bytes are read and written; TCP sends them from the
    /// page cache (`sendfile`).
    fn send_file<'a>(
        &'a mut self,
        slice: &'a FileSlice,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        copy_file_slice(self, slice)
    }

    /// Bytes of a frame the connection may hold above its socket, already
    /// received but not yet read (TLS: a partly received record and one
    /// record's plaintext).
    const HELD_ABOVE_SOCKET: usize = 0;

    /// Wake a reader only once `bytes` are waiting in the socket (or it
    /// closes): `SO_RCVLOWAT`. The caller passes no more than it knows is
    /// still to arrive, so nothing waits on bytes that never come. By
    /// default (no socket) nothing is done.
    fn set_read_low_water(&mut self, bytes: usize) -> io::Result<()> {
        let _ = bytes;
        Ok(())
    }
}

/// Sets `SO_RCVLOWAT` on a socket. Linux's TCP honours it in `epoll` (the
/// socket turns readable at that many bytes, at a FIN, or when its receive
/// buffer is full), grows the receive buffer to fit it, and re-checks
/// readiness when it is lowered. Elsewhere lowering the mark may raise no
/// event for bytes already queued, so the mark is left alone there.
#[cfg(target_os = "linux")]
fn set_rcvlowat(socket: std::os::fd::RawFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `socket` is an open descriptor its caller owns for the call;
    // the option value is a c_int that lives across it, its size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn set_rcvlowat(_socket: std::os::fd::RawFd, _bytes: usize) -> io::Result<()> {
    Ok(())
}

/// Reads `slice` into memory and writes it to `stream`.
async fn copy_file_slice<S: Stream + ?Sized>(stream: &mut S, slice: &FileSlice) -> io::Result<()> {
    let mut buf = Vec::with_capacity(slice.len);
    slice.read_into(&mut buf)?;
    stream.write_all(&buf).await
}

/// Where the server accepts connections.
pub trait Listener: Send + 'static {
    type Conn: ServerConn;

    /// The next connection and its peer's address.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Conn, SocketAddr)>> + Send + '_;
}

/// A connection being opened.
pub type Connecting = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send + 'static>>;

/// How a broker opens connections to other brokers.
pub trait Transport: Send + Sync + 'static {
    /// Connects to the listener at `addr` (`host:port`, as registered).
    fn connect(&self, addr: &str) -> Connecting;

    /// The SASL credentials to authenticate with once connected (the
    /// inter-broker listener's), if it uses SASL.
    fn sasl(&self) -> Option<&SaslCredentials> {
        None
    }
}

/// The SASL credentials a broker presents to another.
#[derive(Clone)]
pub struct SaslCredentials {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} as {}", self.mechanism, self.username)
    }
}

impl ServerConn for tokio::net::TcpStream {
    fn readable(&mut self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        tokio::net::TcpStream::readable(self)
    }

    fn set_read_low_water(&mut self, bytes: usize) -> io::Result<()> {
        set_rcvlowat(self.as_raw_fd(), bytes)
    }

    async fn closed(&mut self) {
        let mut byte = [0u8; 1];
        match self.peek(&mut byte).await {
            Ok(0) | Err(_) => {}
            // The next request is waiting: the peer is there.
            Ok(_) => std::future::pending().await,
        }
    }

    async fn send_file(&mut self, slice: &FileSlice) -> io::Result<()> {
        let Some(file) = slice.file.raw_fd() else {
            return copy_file_slice(self, slice).await;
        };
        let socket = self.as_raw_fd();
        let end = slice.pos + slice.len as u64;
        let mut at = libc::off_t::try_from(slice.pos).map_err(io::Error::other)?;
        loop {
            let left = end.saturating_sub(at as u64) as usize;
            if left == 0 {
                return Ok(());
            }
            self.writable().await?;
            let sent = self.try_io(Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the call: the socket
                // is `self`'s, the file is held open by `slice`; `at` is a
                // valid off_t the kernel advances by what it sent.
                let n = unsafe { libc::sendfile(socket, file, &mut at, left) };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match sent {
                // The file ends before the slice: it was truncated under
                // the fetch (a deposed leader). The response cannot be
                // completed; the client retries on a new connection.
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "segment file shorter than the fetched slice",
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A TLS connection the server accepted. Waiting for the next request
/// fills TLS's own plaintext buffer (cancel-safe: what it read stays
/// there), since the socket's readiness says nothing of what TLS already
/// holds. Records of a fetch are copied through TLS (no `sendfile`).
pub struct TlsConn {
    // Boxed: a TLS session is over a kilobyte, and connection tasks move it.
    inner: Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
}

impl TlsConn {
    pub fn new(stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> TlsConn {
        TlsConn {
            inner: Box::new(stream),
        }
    }

    /// The client's certificate (the end of its chain), when it sent one.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        let (_, session) = self.inner.get_ref();
        session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.as_ref())
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

impl ServerConn for TlsConn {
    /// rustls stops reading the socket once it has a record's plaintext, and
    /// its receive buffer holds at most one record's largest wire size
    /// (18,437 bytes): plaintext and ciphertext together stay below that;
    /// 64 KiB leaves room to spare.
    const HELD_ABOVE_SOCKET: usize = 64 * 1024;

    fn set_read_low_water(&mut self, bytes: usize) -> io::Result<()> {
        set_rcvlowat(self.inner.get_ref().0.as_raw_fd(), bytes)
    }

    async fn readable(&mut self) -> io::Result<()> {
        use tokio::io::AsyncBufReadExt;
        self.inner.fill_buf().await.map(|_| ())
    }

    async fn closed(&mut self) {
        use tokio::io::AsyncBufReadExt;
        match self.inner.fill_buf().await {
            Ok([]) | Err(_) => {}
            Ok(_) => std::future::pending().await,
        }
    }
}

impl Listener for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;

    async fn accept(&self) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
        let (stream, peer) = tokio::net::TcpListener::accept(self).await?;
        // Requests and responses are small frames: no Nagle delay.
        let _ = stream.set_nodelay(true);
        Ok((stream, peer))
    }
}

/// TCP, as the binary runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpTransport;

impl TcpTransport {
    pub fn shared() -> std::sync::Arc<dyn Transport> {
        std::sync::Arc::new(TcpTransport)
    }
}

impl Transport for TcpTransport {
    fn connect(&self, addr: &str) -> Connecting {
        let addr = addr.to_string();
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as Box<dyn Stream>)
        })
    }
}
