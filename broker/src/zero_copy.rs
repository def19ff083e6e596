//! Zero-copy fetch responses. A fetch reads no record bytes: the log hands
//! out slices of its segment files (`PartitionLog::read_slices`), the
//! handler puts a placeholder where each partition's records go
//! ([`SliceRegistry::placeholder`]), and the response is encoded into a
//! [`SpliceBuf`], which keeps the encoded fields in memory and turns each
//! placeholder back into its file slices. The server then writes the
//! memory chunks and sends the slices with `sendfile` (`ServerConn::send_file`),
//! so the page cache goes to the socket without passing through the broker:
//! no `pread` into a buffer, no copy into the response, no zeroing of either.
//!
//! A placeholder is a `Bytes` over a static region that is never read or
//! written (it stays in `.bss`, costing no memory): the k-th placeholder of
//! a response starts k bytes into it, so its address says which slices it
//! stands for, wherever the codec puts it.

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;
use parking_lot::Mutex;
use std::ops::Range;
use strand_log::FileSlice;

/// The longest records field sent from the files; a longer one (a single
/// batch above every fetch limit) is read into memory as before.
const MAX_SPLICED_LEN: usize = 64 << 20;
/// Placeholders per response; partitions beyond are read into memory.
const MAX_PLACEHOLDERS: usize = 1 << 20;

/// What placeholders point into. Never read: [`SpliceBuf`] recognises a
/// placeholder by its address before any byte of it would be copied. Only
/// its addresses matter, so it is a zeroed allocation that no page of is
/// ever touched (address space, not memory), rather than a static the
/// binary would carry (68 MB of zeros).
static HOLE: std::sync::LazyLock<&'static [u8]> = std::sync::LazyLock::new(|| {
    Box::leak(vec![0u8; MAX_SPLICED_LEN + MAX_PLACEHOLDERS].into_boxed_slice())
});

/// The slices a response's placeholders stand for, in placeholder order.
/// One per request (in its `RequestContext`).
#[derive(Default)]
pub struct SliceRegistry(Mutex<Vec<Vec<FileSlice>>>);

impl SliceRegistry {
    /// A records field of `len` bytes that the response will send from
    /// `slices`; `None` when it cannot (nothing to send, or past the
    /// limits above): the caller reads the bytes instead.
    pub fn placeholder(&self, slices: Vec<FileSlice>, len: usize) -> Option<Bytes> {
        debug_assert_eq!(slices.iter().map(|s| s.len).sum::<usize>(), len);
        let mut all = self.0.lock();
        let k = all.len();
        if len == 0 || len > MAX_SPLICED_LEN || k >= MAX_PLACEHOLDERS {
            return None;
        }
        all.push(slices);
        let hole: &'static [u8] = *HOLE;
        Some(Bytes::from_static(&hole[k..k + len]))
    }

    /// The registered slices (the registry is left empty).
    pub fn take(&self) -> Vec<Vec<FileSlice>> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// The index of the placeholder `src` is, if it is one.
fn placeholder_index(src: &[u8]) -> Option<usize> {
    let hole: &'static [u8] = *HOLE;
    let base = hole.as_ptr() as usize;
    let at = src.as_ptr() as usize;
    (!src.is_empty() && at >= base && at + src.len() <= base + hole.len()).then(|| at - base)
}

/// A piece of an encoded response.
pub enum Chunk {
    Mem(BytesMut),
    File(FileSlice),
}

/// An encoding buffer that replaces placeholders by their file slices.
pub struct SpliceBuf {
    chunks: Vec<Chunk>,
    cur: BytesMut,
    /// Bytes already moved into `chunks` (memory and files).
    moved: usize,
    slices: Vec<Option<Vec<FileSlice>>>,
    /// A placeholder came up that was not registered (or twice): the
    /// response is wrong and must not be sent.
    broken: bool,
}

impl SpliceBuf {
    /// Encodes into `buf` (reused: its capacity serves the memory chunks).
    pub fn new(mut buf: BytesMut, slices: Vec<Vec<FileSlice>>) -> Self {
        buf.clear();
        SpliceBuf {
            chunks: Vec::new(),
            cur: buf,
            moved: 0,
            slices: slices.into_iter().map(Some).collect(),
            broken: false,
        }
    }

    /// The chunks in order, and the buffer's remainder to reuse; `None` if
    /// a placeholder had no slices (a bug: nothing may be sent).
    /// `size_prefix` is overwritten with the length of everything after it.
    pub fn finish(mut self, size_prefix: Range<usize>) -> Option<(Vec<Chunk>, BytesMut)> {
        if self.broken {
            return None;
        }
        let total = self.moved + self.cur.len();
        let len = i32::try_from(total.checked_sub(size_prefix.end)?).ok()?;
        if !self.cur.is_empty() {
            let rest = self.cur.split();
            self.chunks.push(Chunk::Mem(rest));
        }
        // The prefix was written first, before any placeholder.
        match self.chunks.first_mut() {
            Some(Chunk::Mem(m)) if m.len() >= size_prefix.end => {
                m[size_prefix].copy_from_slice(&len.to_be_bytes());
            }
            _ => return None,
        }
        Some((self.chunks, self.cur))
    }

    fn splice(&mut self, k: usize, len: usize) {
        let Some(slices) = self.slices.get_mut(k).and_then(Option::take) else {
            self.broken = true;
            return;
        };
        if slices.iter().map(|s| s.len).sum::<usize>() != len {
            self.broken = true;
            return;
        }
        if !self.cur.is_empty() {
            let mem = self.cur.split();
            self.moved += mem.len();
            self.chunks.push(Chunk::Mem(mem));
        }
        self.moved += len;
        self.chunks.extend(slices.into_iter().map(Chunk::File));
    }
}

// SAFETY: every method forwards to the `BytesMut` being written, which
// upholds `BufMut`'s contract; `put_slice` either forwards too or writes
// nothing to memory (a placeholder becomes file chunks).
unsafe impl BufMut for SpliceBuf {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut()`,
        // which is `cur`'s.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        match placeholder_index(src) {
            Some(k) => self.splice(k, src.len()),
            None => self.cur.extend_from_slice(src),
        }
    }
}

impl ByteBufMut for SpliceBuf {
    fn offset(&self) -> usize {
        self.moved + self.cur.len()
    }

    fn seek(&mut self, offset: usize) {
        // Gaps (record batch building) are not used by messages; within the
        // unsplit tail they work as on a `BytesMut`.
        if let Some(at) = offset.checked_sub(self.moved) {
            self.cur.resize(at, 0);
        }
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let (start, end) = (
            r.start.saturating_sub(self.moved),
            r.end.saturating_sub(self.moved),
        );
        self.cur.get_mut(start..end).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use std::path::Path;
    use strand_log::storage::{MemStorage, Storage};

    /// A file of `content` in memory storage, and slices of it.
    fn file(content: &[u8]) -> std::sync::Arc<dyn strand_log::storage::StorageFile> {
        let storage = MemStorage::new();
        storage.create_dir_all(Path::new("/p")).unwrap();
        let f = storage.open(Path::new("/p/seg.log"), true).unwrap();
        f.write_all_at(content, 0).unwrap();
        std::sync::Arc::from(f)
    }

    fn slice(
        f: &std::sync::Arc<dyn strand_log::storage::StorageFile>,
        pos: u64,
        len: usize,
    ) -> FileSlice {
        FileSlice {
            file: f.clone(),
            pos,
            len,
        }
    }

    fn response(records: Vec<Option<Bytes>>) -> FetchResponse {
        let partitions = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_high_watermark(100 + i as i64)
                    .with_records(r)
            })
            .collect();
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)])
    }

    /// The spliced chunks, written out, are byte for byte the response
    /// encoded with the records in memory, at every Fetch version (compact
    /// and classic bytes), with several partitions, one of them empty and
    /// one spread over two files.
    #[test]
    fn spliced_response_is_the_copied_one() {
        let a = file(b"0123456789abcdefghij");
        let b = file(b"ABCDEFGHIJ");
        let wanted: Vec<(Vec<FileSlice>, &[u8])> = vec![
            (vec![slice(&a, 2, 5)], b"23456"),
            (vec![], b""),
            (vec![slice(&a, 10, 10), slice(&b, 0, 3)], b"abcdefghijABC"),
        ];
        for version in 4..=17 {
            let copied = response(
                wanted
                    .iter()
                    .map(|(_, r)| Some(Bytes::copy_from_slice(r)))
                    .collect(),
            );
            let mut expected = BytesMut::new();
            expected.put_i32(0);
            copied.encode(&mut expected, version).unwrap();
            let len = (expected.len() - 4) as i32;
            expected[..4].copy_from_slice(&len.to_be_bytes());

            let registry = SliceRegistry::default();
            let spliced = response(
                wanted
                    .iter()
                    .map(|(s, r)| {
                        Some(registry.placeholder(s.clone(), r.len()).unwrap_or_default())
                    })
                    .collect(),
            );
            let mut buf = SpliceBuf::new(BytesMut::new(), registry.take());
            buf.put_i32(0);
            spliced.encode(&mut buf, version).unwrap();
            let (chunks, _) = buf.finish(0..4).expect("every placeholder registered");
            let mut got = Vec::new();
            for c in &chunks {
                match c {
                    Chunk::Mem(m) => got.extend_from_slice(m),
                    Chunk::File(s) => s.read_into(&mut got).unwrap(),
                }
            }
            assert_eq!(got, expected.to_vec(), "v{version}");
            let files = chunks
                .iter()
                .filter(|c| matches!(c, Chunk::File(_)))
                .count();
            assert_eq!(files, 3, "v{version}: the records go as file slices");
        }
    }

    /// Over TCP the slices go with `sendfile`, from the offset asked, whole
    /// even when the socket's buffer fills many times over (the reader is
    /// slower than the writer), and a slice past the file's end is an
    /// error, not a short response.
    #[tokio::test]
    async fn tcp_sends_file_slices_whole() {
        use crate::transport::ServerConn;
        use strand_log::storage::FileStorage;
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let content: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let f: std::sync::Arc<dyn strand_log::storage::StorageFile> =
            std::sync::Arc::from(FileStorage.open(&path, false).unwrap());
        assert!(f.raw_fd().is_some());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = c.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    return got;
                }
                got.extend_from_slice(&buf[..n]);
                // Slower than the sender: the socket buffer fills.
                tokio::task::yield_now().await;
            }
        });
        let (mut server, _) = listener.accept().await.unwrap();
        let (a, b) = (slice(&f, 3, 5 << 20), slice(&f, 1, 2));
        server.send_file(&a).await.unwrap();
        server.send_file(&b).await.unwrap();
        let past = slice(&f, (8 << 20) - 10, 20);
        let err = server.send_file(&past).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        drop(server);
        let got = reader.await.unwrap();
        let mut want = content[3..3 + (5 << 20)].to_vec();
        want.extend_from_slice(&content[1..3]);
        // What the failed slice sent before the file ended.
        want.extend_from_slice(&content[(8 << 20) - 10..]);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the bytes sent are the file's");
    }

    /// A placeholder nobody registered makes the response unsendable
    /// rather than zeros on the wire.
    #[test]
    fn an_unregistered_placeholder_is_refused() {
        let registry = SliceRegistry::default();
        let a = file(b"xyz");
        let p = registry.placeholder(vec![slice(&a, 0, 3)], 3).unwrap();
        let resp = response(vec![Some(p)]);
        // The slices are not handed to the buffer.
        let mut buf = SpliceBuf::new(BytesMut::new(), Vec::new());
        buf.put_i32(0);
        resp.encode(&mut buf, 12).unwrap();
        assert!(buf.finish(0..4).is_none());
    }
}
