//! An in-memory network for the broker's own transport seam
//! (`strand_broker::transport`): hosts listen on addresses, connections are
//! pairs of byte pipes, and the test cuts and heals links between hosts.
//!
//! A cut behaves as a network partition does to TCP, not as a reset: bytes
//! written across it wait (as unacknowledged segments do) and reads see
//! nothing new until the link heals, when they arrive; a connect across it
//! waits for the heal (or the caller's timeout), as a dropped SYN does. A
//! closed end gives the other end end-of-stream. Bytes take the network's
//! latency to cross (in order): without it a paused runtime, which moves
//! time only when every task waits, would never move it while clients and
//! followers keep one another busy. Everything is one mutex, wakers and
//! timers: the simulation runs on one thread.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use strand_broker::transport::{Connecting, Listener, ServerConn, Stream, Transport};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

/// A host on the network (a broker, the controller's clients, the test's clients).
pub type Host = u32;

/// One direction of a connection.
#[derive(Default)]
struct Pipe {
    from: Host,
    to: Host,
    /// Written bytes, each chunk readable from its instant on.
    chunks: std::collections::VecDeque<(Instant, Vec<u8>)>,
    /// The writer closed: the reader sees end-of-stream once drained.
    writer_closed: bool,
    /// The reader closed: writes fail.
    reader_closed: bool,
    reader: Option<Waker>,
}

#[derive(Default)]
struct Net {
    pipes: Vec<Pipe>,
    listeners: BTreeMap<String, (Host, mpsc::UnboundedSender<(SimConn, SocketAddr)>)>,
    /// Unordered pairs of hosts that cannot reach each other.
    cuts: BTreeSet<(Host, Host)>,
    /// One way, for every link.
    latency: Duration,
}

impl Net {
    fn cut(&self, a: Host, b: Host) -> bool {
        self.cuts.contains(&(a.min(b), a.max(b)))
    }
}

/// The network; clones share it.
#[derive(Clone)]
pub struct SimNetwork {
    net: Arc<Mutex<Net>>,
    /// Woken on every heal (connects waiting across a cut look again).
    healed: Arc<Notify>,
}

impl SimNetwork {
    /// A network whose links take `latency` one way.
    pub fn new(latency: Duration) -> SimNetwork {
        SimNetwork {
            net: Arc::new(Mutex::new(Net {
                latency,
                ..Net::default()
            })),
            healed: Arc::new(Notify::new()),
        }
    }

    /// The address hosts use for `host`'s listener.
    pub fn addr_of(host: Host, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, (host >> 8) as u8, host as u8], port))
    }

    /// Starts listening on `addr` for `host`.
    pub fn listen(&self, host: Host, addr: SocketAddr) -> SimListener {
        let (tx, rx) = mpsc::unbounded_channel();
        self.net
            .lock()
            .listeners
            .insert(addr.to_string(), (host, tx));
        SimListener {
            accepted: tokio::sync::Mutex::new(rx),
        }
    }

    /// A transport for connections opened by `host`.
    pub fn transport(&self, host: Host) -> Arc<dyn Transport> {
        Arc::new(SimTransport {
            network: self.clone(),
            host,
        })
    }

    /// Whether `a` and `b` can reach each other now.
    pub fn connected(&self, a: Host, b: Host) -> bool {
        !self.net.lock().cut(a, b)
    }

    /// Cuts the link between `a` and `b` (both ways).
    pub fn cut(&self, a: Host, b: Host) {
        if a != b {
            self.net.lock().cuts.insert((a.min(b), a.max(b)));
        }
    }

    /// Heals every cut, delivering what waited.
    pub fn heal_all(&self) {
        let wakers: Vec<Waker> = {
            let mut net = self.net.lock();
            net.cuts.clear();
            net.pipes
                .iter_mut()
                .filter_map(|p| p.reader.take())
                .collect()
        };
        for w in wakers {
            w.wake();
        }
        self.healed.notify_waiters();
    }

    async fn connect(&self, from: Host, addr: String) -> io::Result<SimConn> {
        loop {
            // Registered before looking, so a heal in between is not missed.
            let healed = self.healed.notified();
            {
                let mut net = self.net.lock();
                let Some((to, accept)) = net.listeners.get(&addr).cloned() else {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!("nothing listens on {addr}"),
                    ));
                };
                if !net.cut(from, to) {
                    let up = net.pipes.len();
                    net.pipes.push(Pipe {
                        from,
                        to,
                        ..Pipe::default()
                    });
                    net.pipes.push(Pipe {
                        from: to,
                        to: from,
                        ..Pipe::default()
                    });
                    let down = up + 1;
                    let client = SimConn::new(self.clone(), down, up);
                    let server = SimConn::new(self.clone(), up, down);
                    drop(net);
                    let peer = SimNetwork::addr_of(from, 40_000);
                    return match accept.send((server, peer)) {
                        Ok(()) => Ok(client),
                        Err(_) => Err(io::ErrorKind::ConnectionRefused.into()),
                    };
                }
            }
            healed.await;
        }
    }
}

struct SimTransport {
    network: SimNetwork,
    host: Host,
}

impl Transport for SimTransport {
    fn connect(&self, addr: &str) -> Connecting {
        let (network, host, addr) = (self.network.clone(), self.host, addr.to_string());
        Box::pin(async move {
            let conn = network.connect(host, addr).await?;
            Ok(Box::new(conn) as Box<dyn Stream>)
        })
    }
}

/// Accepts the connections made to one address.
pub struct SimListener {
    accepted: tokio::sync::Mutex<mpsc::UnboundedReceiver<(SimConn, SocketAddr)>>,
}

impl Listener for SimListener {
    type Conn = SimConn;

    async fn accept(&self) -> io::Result<(SimConn, SocketAddr)> {
        match self.accepted.lock().await.recv().await {
            Some(c) => Ok(c),
            None => std::future::pending().await,
        }
    }
}

/// One end of a connection.
pub struct SimConn {
    network: SimNetwork,
    /// Index of the pipe this end reads, and of the one it writes.
    rx: usize,
    tx: usize,
    /// Wakes the reader when the next chunk arrives.
    arrival: Mutex<Pin<Box<tokio::time::Sleep>>>,
}

impl SimConn {
    fn new(network: SimNetwork, rx: usize, tx: usize) -> SimConn {
        SimConn {
            network,
            rx,
            tx,
            arrival: Mutex::new(Box::pin(tokio::time::sleep(Duration::ZERO))),
        }
    }

    /// Ready when a read would not wait; registers `cx` otherwise.
    fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut net = self.network.net.lock();
        let cut = {
            let p = &net.pipes[self.rx];
            net.cut(p.from, p.to)
        };
        let p = &mut net.pipes[self.rx];
        if cut {
            p.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        match p.chunks.front().map(|(at, _)| *at) {
            Some(at) if at <= Instant::now() => Poll::Ready(()),
            Some(at) => {
                // Still on the wire: wake when it lands (or on a write or heal).
                p.reader = Some(cx.waker().clone());
                drop(net);
                let mut arrival = self.arrival.lock();
                arrival.as_mut().reset(at);
                match arrival.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(()),
                    Poll::Pending => Poll::Pending,
                }
            }
            None if p.writer_closed => Poll::Ready(()),
            None => {
                p.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl AsyncRead for SimConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.poll_ready(cx).is_pending() {
            return Poll::Pending;
        }
        let mut net = self.network.net.lock();
        let p = &mut net.pipes[self.rx];
        let now = Instant::now();
        // Every chunk that has landed, as far as the buffer goes; none
        // here means the writer closed: end of stream.
        while buf.remaining() > 0 {
            let Some((at, chunk)) = p.chunks.front_mut().filter(|(at, _)| *at <= now) else {
                break;
            };
            let _ = at;
            let n = buf.remaining().min(chunk.len());
            buf.put_slice(&chunk[..n]);
            chunk.drain(..n);
            if chunk.is_empty() {
                p.chunks.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SimConn {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let waker = {
            let mut net = self.network.net.lock();
            let latency = net.latency;
            let p = &mut net.pipes[self.tx];
            if p.reader_closed {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            // In order: never before the chunk ahead of it.
            let at = p
                .chunks
                .back()
                .map(|(at, _)| *at)
                .unwrap_or_else(Instant::now)
                .max(Instant::now() + latency);
            p.chunks.push_back((at, data.to_vec()));
            p.reader.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let waker = {
            let mut net = self.network.net.lock();
            let p = &mut net.pipes[self.tx];
            p.writer_closed = true;
            p.reader.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl ServerConn for SimConn {
    fn readable(&mut self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        std::future::poll_fn(move |cx| self.poll_ready(cx).map(Ok))
    }

    async fn closed(&mut self) {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await;
        // Ready with nothing to read: the peer closed its end.
        let closed = {
            let net = self.network.net.lock();
            let p = &net.pipes[self.rx];
            p.chunks.is_empty() && p.writer_closed
        };
        if !closed {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for SimConn {
    fn drop(&mut self) {
        let wakers: Vec<Waker> = {
            let mut net = self.network.net.lock();
            net.pipes[self.tx].writer_closed = true;
            let peer_reader = net.pipes[self.tx].reader.take();
            let rx = &mut net.pipes[self.rx];
            rx.reader_closed = true;
            // Nobody reads these any more.
            rx.chunks = Default::default();
            peer_reader.into_iter().collect()
        };
        for w in wakers {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    #[test]
    fn bytes_cross_a_link_wait_out_a_cut_and_end_with_the_writer() {
        runtime().block_on(async {
            let net = SimNetwork::new(Duration::from_millis(1));
            let addr = SimNetwork::addr_of(2, 9092);
            let listener = net.listen(2, addr);
            let mut client = net.transport(1).connect(&addr.to_string()).await.unwrap();
            let (mut server, peer) = listener.accept().await.unwrap();
            assert_eq!(peer.ip(), SimNetwork::addr_of(1, 0).ip());
            client.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            server.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"ping");

            // Across a cut nothing arrives; after the heal it does.
            net.cut(1, 2);
            server.write_all(b"pong").await.unwrap();
            let waited =
                tokio::time::timeout(std::time::Duration::from_secs(5), client.read_exact(&mut b))
                    .await;
            assert!(waited.is_err(), "read across a cut");
            net.heal_all();
            client.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"pong");

            drop(client);
            assert_eq!(server.read(&mut b).await.unwrap(), 0, "end of stream");
        });
    }

    #[test]
    fn a_connect_across_a_cut_waits_for_the_heal() {
        runtime().block_on(async {
            let net = SimNetwork::new(Duration::from_millis(1));
            let addr = SimNetwork::addr_of(2, 9092).to_string();
            let _listener = net.listen(2, SimNetwork::addr_of(2, 9092));
            net.cut(1, 2);
            let t = net.transport(1);
            let waited =
                tokio::time::timeout(std::time::Duration::from_secs(5), t.connect(&addr)).await;
            assert!(waited.is_err(), "connected across a cut");
            let pending = tokio::spawn({
                let t = net.transport(1);
                let addr = addr.clone();
                async move { t.connect(&addr).await.map(|_| ()) }
            });
            tokio::task::yield_now().await;
            net.heal_all();
            pending.await.unwrap().unwrap();
            let refused = net.transport(1).connect("10.0.0.9:1").await;
            assert_eq!(
                refused.err().map(|e| e.kind()),
                Some(io::ErrorKind::ConnectionRefused)
            );
        });
    }
}
