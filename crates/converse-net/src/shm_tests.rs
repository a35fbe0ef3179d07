//! Unit tests of the shm module (`shm`): two or more modules of one
//! test process stand for processes of a job. Each test has a job tag (and
//! segment id) of its own (tests run in parallel) and checks that the modules
//! left no segment behind in `/dev/shm` once finalized or dropped.
use super::*;
use crate::frame::FRAME_HEADER_SIZE;
use crate::lmt::COOKIE_LEN;
use crate::netmod::DataAvail;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::mpsc;

/// The largest payload the test modules accept.
const MAX_PAYLOAD: usize = 64 << 20;

/// A generous guard against hangs (never a timing assertion).
const HANG: Duration = Duration::from_secs(30);

/// One frame or message handed up.
#[derive(Debug)]
struct Got {
    peer: usize,
    header: FrameHeader,
    body: Vec<u8>,
    /// It came through `Upcalls::message` (received into a message buffer).
    as_message: bool,
}

/// What a module reported, in order; and the cards it serves
/// (`peer_card`), as the layer above learns them from the bootstrap.
struct Record {
    got: Mutex<Vec<Got>>,
    events: Mutex<Vec<String>>,
    /// `room()` says yes while fewer than this many frames were handed up.
    limit: AtomicUsize,
    /// The cards `peer_card` answers with, by process (shared by the
    /// modules of a test job).
    cards: Arc<Mutex<HashMap<usize, String>>>,
    /// How many times `peer_card` was asked for each process.
    card_calls: Mutex<HashMap<usize, usize>>,
}

impl Record {
    fn new() -> Arc<Record> {
        Record::serving(Arc::new(Mutex::new(HashMap::new())))
    }

    /// A record whose `peer_card` answers from `cards`.
    fn serving(cards: Arc<Mutex<HashMap<usize, String>>>) -> Arc<Record> {
        Arc::new(Record {
            got: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            limit: AtomicUsize::new(usize::MAX),
            cards,
            card_calls: Mutex::new(HashMap::new()),
        })
    }

    /// How many times `peer_card` was asked for `peer`.
    fn card_calls(&self, peer: usize) -> usize {
        lock(&self.card_calls).get(&peer).copied().unwrap_or(0)
    }

    fn count(&self) -> usize {
        lock(&self.got).len()
    }

    fn events(&self) -> Vec<String> {
        lock(&self.events).clone()
    }
}

impl Upcalls for Record {
    fn frame(&self, peer: usize, header: FrameHeader, body: Vec<u8>) {
        lock(&self.got).push(Got {
            peer,
            header,
            body,
            as_message: false,
        });
    }
    fn vc_terminated(&self, peer: usize) {
        lock(&self.events).push(format!("terminated {peer}"));
    }
    fn vc_failed(&self, peer: usize, why: String) {
        lock(&self.events).push(format!("failed {peer}: {why}"));
    }
    fn message(&self, peer: usize, header: FrameHeader, msg: Message) {
        lock(&self.got).push(Got {
            peer,
            header,
            body: msg.as_bytes().to_vec(),
            as_message: true,
        });
    }
    fn room(&self) -> bool {
        self.count() < self.limit.load(Ordering::SeqCst)
    }
    fn peer_card(&self, peer: usize, prefix: &str) -> Result<String, NetError> {
        assert_eq!(prefix, "shm:");
        *lock(&self.card_calls).entry(peer).or_default() += 1;
        lock(&self.cards)
            .get(&peer)
            .cloned()
            .ok_or_else(|| NetError::peer(peer, "the bootstrap knows no such process"))
    }
}

/// A fresh random job tag.
fn random_tag() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// The segments of one test job. On drop, removes whatever is left (so a
/// failing test leaves nothing behind); [`Job::assert_clean`] checks that
/// the modules removed them themselves.
struct Job {
    tag: u64,
    nodes: usize,
    /// The modules `job_in` made, finalized by `assert_clean` (as the
    /// layer above finalizes its modules at the end).
    made: Mutex<Vec<Arc<ShmModule>>>,
}

impl Job {
    fn new(nodes: usize) -> Job {
        Job::tagged(random_tag(), nodes)
    }

    fn tagged(tag: u64, nodes: usize) -> Job {
        Job {
            tag,
            nodes,
            made: Mutex::new(Vec::new()),
        }
    }

    /// This job's names in `/dev/shm`.
    fn leftovers(&self) -> Vec<String> {
        (0..self.nodes)
            .map(|n| {
                segment_name(self.tag, n)
                    .trim_start_matches('/')
                    .to_string()
            })
            .filter(|name| std::path::Path::new("/dev/shm").join(name).exists())
            .collect()
    }

    /// Finalizes the modules `job_in` made, then checks that no name of the
    /// job is left (other modules must be finalized or dropped first).
    fn assert_clean(&self) {
        for m in lock(&self.made).drain(..) {
            m.finalize();
        }
        let left = self.leftovers();
        assert!(left.is_empty(), "segments left in /dev/shm: {left:?}");
    }

    /// Process `me`'s module, not connected yet.
    fn module(&self, me: usize) -> (ShmModule, Arc<Record>) {
        let m = ShmModule::init(me, self.nodes, self.tag, self.tag, MAX_PAYLOAD).unwrap();
        let rec = Record::new();
        m.set_upcalls(rec.clone());
        (m, rec)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for n in 0..self.nodes {
            let _ = rustix::shm::unlink(segment_name(self.tag, n).as_str());
        }
    }
}

type Side = (Arc<ShmModule>, Arc<Record>);

/// Connects every module to every other, as start-up does.
fn connect(mods: &[&ShmModule]) {
    for m in mods {
        for other in mods.iter().filter(|o| o.me != m.me) {
            m.vc_init(other.me, &other.business_card()).unwrap();
        }
    }
    for m in mods {
        let peers: Vec<usize> = mods.iter().map(|o| o.me).filter(|&p| p != m.me).collect();
        m.accept_peers(&peers, Instant::now() + Duration::from_secs(10))
            .unwrap();
    }
}

/// A job of `nodes` connected processes.
fn job(nodes: usize) -> (Job, Vec<Side>) {
    job_in(nodes, Mode::Get)
}

/// A job of `nodes` connected processes whose large messages move in
/// `mode`.
fn job_in(nodes: usize, mode: Mode) -> (Job, Vec<Side>) {
    let job = Job::new(nodes);
    let mods: Vec<_> = (0..nodes)
        .map(|me| {
            let (m, r) = job.module(me);
            (m.with_lmt_mode(mode), r)
        })
        .collect();
    connect(&mods.iter().map(|(m, _)| m).collect::<Vec<_>>());
    let sides: Vec<Side> = mods.into_iter().map(|(m, r)| (Arc::new(m), r)).collect();
    lock(&job.made).extend(sides.iter().map(|(m, _)| Arc::clone(m)));
    (job, sides)
}

/// Two connected processes, 0 and 1.
fn pair() -> (Job, Side, Side) {
    pair_in(Mode::Get)
}

/// Two connected processes, 0 and 1, whose large messages move in `mode`.
fn pair_in(mode: Mode) -> (Job, Side, Side) {
    let (job, mut sides) = job_in(2, mode);
    let b = sides.pop().unwrap();
    let a = sides.pop().unwrap();
    (job, a, b)
}

/// Bytes `m` has lent to `peer` (large messages in flight).
fn lent(m: &ShmModule, peer: usize) -> usize {
    m.vc(peer).map_or(0, |vc| vc.lmt.lent_bytes())
}

fn header(kind: FrameKind, len: usize, tag: u32) -> FrameHeader {
    FrameHeader {
        kind,
        flags: 0,
        len: len as u32,
        src: 7,
        tag,
    }
}

/// A body of `len` bytes that tells frames apart.
fn pattern(tag: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(tag.wrapping_mul(7)) as u8
        })
        .collect()
}

/// Polls the modules until `done`, failing after [`HANG`].
fn poll_until(mods: &[&ShmModule], done: impl Fn() -> bool) {
    let end = Instant::now() + HANG;
    while !done() {
        assert!(Instant::now() < end, "timed out");
        for m in mods {
            m.poll(PollDir::InFirst, Some(Duration::from_millis(1)))
                .unwrap();
        }
    }
}

/// Waits (without polling) until `done`, failing after [`HANG`].
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let end = Instant::now() + HANG;
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The ring `writer` writes for `m`, as `m` maps it (taking the
/// announcements first).
fn inbound(m: &ShmModule, writer: usize) -> &Mapping {
    m.take_announcements(Taking::All);
    m.vc(writer)
        .ok()
        .and_then(|vc| vc.inb.get())
        .expect("a ring announced")
}

/// Cells of the ring `writer` writes for `m`, published and not read yet.
fn cells_in(m: &ShmModule, writer: usize) -> u64 {
    let ring = inbound(m, writer).ring();
    let head = ring.head().load(Ordering::SeqCst);
    (head..head + CELLS as u64)
        .take_while(|&i| ring.is_ready(i))
        .count() as u64
}

/// A progress thread: polls `m` (each poll waiting up to `timeout`, `None`:
/// until something happens) until `stop`.
fn progress_thread(
    m: &Arc<ShmModule>,
    stop: &Arc<AtomicBool>,
    timeout: Option<Duration>,
) -> std::thread::JoinHandle<()> {
    let (m, stop) = (Arc::clone(m), Arc::clone(stop));
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            m.poll(PollDir::InFirst, timeout).unwrap();
        }
    })
}

/// Stops progress threads started with [`progress_thread`].
fn stop_threads(mods: &[&ShmModule], stop: &AtomicBool, threads: Vec<std::thread::JoinHandle<()>>) {
    stop.store(true, Ordering::SeqCst);
    for m in mods {
        m.wake();
    }
    for t in threads {
        t.join().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Frames

#[test]
fn frames_arrive_whole_and_in_order_through_every_send_call() {
    let (job, (a, ra), (b, rb)) = pair();
    assert!(b.ordering());
    let sizes = [
        0,
        1,
        15,
        16,
        17,
        100,
        CELL_DATA - FRAME_HEADER_SIZE - 1,
        CELL_DATA - FRAME_HEADER_SIZE,
        CELL_DATA - FRAME_HEADER_SIZE + 1,
        CELL_DATA,
        CELL_DATA + 1,
        3 * CELL_DATA + 7,
        100 << 10,
        (1 << 20) + 3,
        5 << 20,
    ];
    let mut expect = Vec::new();
    let mut reqs = Vec::new();
    let mut tag = 0u32;
    for &size in &sizes {
        for call in 0..4 {
            let body = pattern(tag, size);
            let h = header(FrameKind::Control, size, tag);
            match call {
                0 => {
                    let r = b
                        .istart_contig(0, h, SendData::Bytes(body.clone()))
                        .unwrap();
                    if size < 1000 && tag < 20 {
                        assert!(r.is_none(), "a small frame goes at once");
                    }
                    reqs.extend(r);
                }
                1 => {
                    let r = SendRequest::new();
                    b.isend_contig(0, r.clone(), h, SendData::Bytes(body.clone()))
                        .unwrap();
                    reqs.push(r);
                }
                2 => {
                    let (x, rest) = body.split_at(size / 3);
                    let (y, z) = rest.split_at(rest.len() / 2);
                    let r = SendRequest::new();
                    b.send_noncontig(0, r.clone(), h, &[x, &[], y, z]).unwrap();
                    reqs.push(r);
                }
                _ => {
                    b.post_contig(0, h, SendData::Bytes(body.clone())).unwrap();
                    b.flush_all();
                }
            }
            expect.push(body);
            tag += 1;
        }
    }
    poll_until(&[&a, &b], || ra.count() == expect.len());
    poll_until(&[&a, &b], || !b.has_queued());
    let got = lock(&ra.got);
    for (i, (g, body)) in got.iter().zip(&expect).enumerate() {
        assert_eq!((g.peer, g.header.tag, g.header.src), (1, i as u32, 7));
        assert_eq!(g.header.kind, FrameKind::Control);
        assert_eq!(g.header.len as usize, body.len());
        assert!(g.body == *body, "frame {i} ({} bytes) garbled", body.len());
        assert!(!g.as_message);
    }
    assert!(reqs.iter().all(|r| r.is_complete()));
    assert_eq!(b.backlog(0), 0);
    assert_eq!(cells_in(&a, 1), 0);
    assert!(ra.events().is_empty() && rb.events().is_empty());
    assert!(
        b.send_noncontig(
            0,
            SendRequest::new(),
            header(FrameKind::Control, 9, 0),
            &[b"abc", b"defgh"]
        )
        .is_err(),
        "a length that disagrees with the iovecs is refused"
    );
    assert_eq!(
        b.istart_contig(5, header(FrameKind::Control, 0, 0), SendData::Bytes(vec![]))
            .err()
            .and_then(|e| e.peer),
        Some(5),
        "no such process"
    );
    job.assert_clean();
}

#[test]
fn a_frame_onto_an_empty_queue_goes_at_once_and_a_backlog_is_packed() {
    let (job, (a, ra), (b, _rb)) = pair();
    let post = |tag: u32| {
        b.post_contig(
            0,
            header(FrameKind::Control, 10, tag),
            SendData::Bytes(pattern(tag, 10)),
        )
        .unwrap()
    };
    // While the receiver keeps up, each frame goes at once, in a cell of
    // its own (the peer may be waiting for it).
    for tag in 0..CELLS as u32 {
        post(tag);
        assert_eq!(
            cells_in(&a, 1),
            tag as u64 + 1,
            "frame {tag} is written at once"
        );
    }
    assert!(!b.has_queued());
    // The ring is full: posted frames wait, and the next flush packs them.
    let n = CELLS as u32;
    for tag in n..n + 50 {
        post(tag);
    }
    assert!(b.has_queued());
    assert_eq!(b.backlog(0), 50 * (FRAME_HEADER_SIZE + 10));
    assert!(!b.flush_all(), "no room yet");
    poll_until(&[&a], || ra.count() == CELLS);
    let tail = b.vc(0).unwrap().tail.load(Ordering::SeqCst);
    assert!(b.flush_all());
    assert!(!b.has_queued());
    assert_eq!(cells_in(&a, 1), 1, "fifty small frames fill one cell");
    assert_eq!(
        inbound(&a, 1).ring().cell_len(tail) as usize,
        50 * (FRAME_HEADER_SIZE + 10)
    );
    // Once the ring is full again, a whole batch waits for room, and
    // arrives in order once the receiver reads.
    for tag in n + 50..2 * n + 49 {
        post(tag);
    }
    assert_eq!(cells_in(&a, 1), CELLS as u64, "the ring is full again");
    for tag in 2 * n + 49..2 * n + 49 + 64 {
        post(tag);
    }
    assert!(b.has_queued(), "no room: the batch waits");
    let total = 2 * CELLS + 49 + 64;
    poll_until(&[&a, &b], || ra.count() == total);
    for (i, g) in lock(&ra.got).iter().enumerate() {
        assert_eq!(g.header.tag, i as u32);
        assert_eq!(g.body, pattern(i as u32, 10));
    }
    job.assert_clean();
}

#[test]
fn three_processes_talk_all_to_all() {
    let (job, sides) = job(3);
    let big = 2 << 20;
    for (m, _) in &sides {
        for to in (0..3).filter(|&p| p != m.me) {
            for i in 0..20u32 {
                let len = if i == 10 { big } else { i as usize * 100 };
                let tag = (m.me as u32) << 8 | i;
                m.istart_contig(
                    to,
                    header(FrameKind::Control, len, tag),
                    SendData::Bytes(pattern(tag, len)),
                )
                .unwrap();
            }
        }
    }
    let mods: Vec<&ShmModule> = sides.iter().map(|(m, _)| &**m).collect();
    poll_until(&mods, || sides.iter().all(|(_, r)| r.count() == 40));
    for (m, r) in &sides {
        let got = lock(&r.got);
        for from in (0..3).filter(|&p| p != m.me) {
            let tags: Vec<u32> = got
                .iter()
                .filter(|g| g.peer == from)
                .map(|g| g.header.tag)
                .collect();
            assert_eq!(
                tags,
                (0..20).map(|i| (from as u32) << 8 | i).collect::<Vec<_>>()
            );
        }
        for g in got.iter() {
            assert_eq!(
                g.header.tag >> 8,
                g.peer as u32,
                "the ring of the right writer"
            );
            assert!(g.body == pattern(g.header.tag, g.header.len as usize));
        }
        assert!(r.events().is_empty());
        let others: Vec<usize> = (0..3).filter(|&p| p != m.me).collect();
        assert_eq!(m.connected_peers(), others);
        assert_eq!(peer_mappings(m), 4, "two headers, two rings");
    }
    job.assert_clean();
}

#[test]
fn a_continuation_sends_more_data_before_completing() {
    let (job, (a, ra), (b, _rb)) = pair();
    // A frame of 6 bytes whose body comes in three pieces: the header and
    // "ab" now, then "cd" and "ef" from the continuation.
    let mut more = vec![b"ef".to_vec(), b"cd".to_vec()];
    let req = SendRequest::with_continuation(Some(Box::new(move || match more.pop() {
        Some(bytes) => DataAvail::More(SendData::Bytes(bytes)),
        None => DataAvail::Complete,
    })));
    assert!(req.has_continuation());
    b.isend_contig(
        0,
        req.clone(),
        header(FrameKind::Control, 6, 1),
        SendData::Bytes(b"ab".to_vec()),
    )
    .unwrap();
    assert!(req.is_complete(), "all of it fit in the ring");
    // Pieces larger than the ring: the continuation runs as each is sent,
    // and a frame sent after the request comes after all of them.
    let piece = CELLS * CELL_DATA / 2 + 5;
    let whole = pattern(2, 3 * piece);
    let mut pieces: Vec<Vec<u8>> = whole.chunks(piece).rev().map(|c| c.to_vec()).collect();
    let first = pieces.pop().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let big = SendRequest::with_continuation(Some(Box::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        match pieces.pop() {
            Some(bytes) => DataAvail::More(SendData::Bytes(bytes)),
            None => DataAvail::Complete,
        }
    })));
    b.isend_contig(
        0,
        big.clone(),
        header(FrameKind::Control, whole.len(), 2),
        SendData::Bytes(first),
    )
    .unwrap();
    assert!(!big.is_complete(), "more than the ring holds");
    let after = b
        .istart_contig(
            0,
            header(FrameKind::Control, 3, 3),
            SendData::Bytes(b"xyz".to_vec()),
        )
        .unwrap();
    assert!(after.is_some(), "queued behind the large frame");
    poll_until(&[&a, &b], || ra.count() == 3);
    let got = lock(&ra.got);
    assert_eq!(got[0].body, b"abcdef");
    assert_eq!(got[1].header.tag, 2);
    assert!(got[1].body == whole);
    assert_eq!((got[2].header.tag, &got[2].body[..]), (3, &b"xyz"[..]));
    assert!(req.is_complete() && big.is_complete() && after.unwrap().is_complete());
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(b.backlog(0), 0);
    job.assert_clean();
}

// ---------------------------------------------------------------------------
// Single-copy large messages

/// A message of `len` bytes (header included) with a recognizable payload.
fn message(len: usize, tag: u32) -> Message {
    let mut msg = Message::alloc(len);
    msg.set_handler(3);
    let n = msg.payload_len();
    msg.payload_mut().copy_from_slice(&pattern(tag, n));
    msg
}

#[test]
fn a_large_message_is_read_in_one_copy_and_its_buffer_given_back() {
    let (job, (a, ra), (b, rb)) = pair();
    assert!(
        b.vc(0).unwrap().single_copy,
        "process_vm_readv works on this system (the probe)"
    );
    let msg = message((2 << 20) + 5, 9);
    let bytes = msg.as_bytes().to_vec();
    b.post_contig(
        0,
        header(FrameKind::Message, msg.len(), 9),
        SendData::Message(msg),
    )
    .unwrap();
    assert!(lent(&b, 0) > 0, "lent until the receiver is done");
    assert_eq!(cells_in(&a, 1), 1, "only the cookie goes through the ring");
    poll_until(&[&a], || ra.count() == 1);
    {
        let got = lock(&ra.got);
        assert!(got[0].as_message, "handed up as a message");
        assert_eq!(a.lmt_reads.load(Ordering::SeqCst), 1, "read in one copy");
        assert_eq!(
            got[0].header,
            FrameHeader {
                kind: FrameKind::Message,
                flags: 0,
                len: bytes.len() as u32,
                src: 7,
                tag: 9
            }
        );
        assert!(got[0].body == bytes);
    }
    poll_until(&[&a, &b], || lent(&b, 0) == 0);
    // Exactly LMT_MIN bytes: single copy; one byte less, and a small one:
    // through the cells.
    for (i, len) in [LMT_MIN, LMT_MIN - 1, 1000].into_iter().enumerate() {
        let msg = message(len, i as u32);
        let bytes = msg.as_bytes().to_vec();
        b.post_contig(
            0,
            header(FrameKind::Message, len, i as u32),
            SendData::Message(msg),
        )
        .unwrap();
        b.flush_all();
        poll_until(&[&a, &b], || ra.count() == i + 2);
        let got = lock(&ra.got);
        assert!(got[i + 1].as_message);
        // Only the first (exactly LMT_MIN bytes) goes by single copy.
        assert_eq!(a.lmt_reads.load(Ordering::SeqCst), 2, "{len} bytes");
        assert!(got[i + 1].body == bytes);
    }
    poll_until(&[&a, &b], || lent(&b, 0) == 0);
    // A Control frame of any size never goes by single copy.
    let body = pattern(4, LMT_MIN * 2);
    b.post_contig(
        0,
        header(FrameKind::Control, body.len(), 4),
        SendData::Bytes(body.clone()),
    )
    .unwrap();
    b.flush_all();
    poll_until(&[&a, &b], || ra.count() == 5);
    assert!(!lock(&ra.got)[4].as_message && lock(&ra.got)[4].body == body);
    assert_eq!(a.lmt_reads.load(Ordering::SeqCst), 2);
    assert!(lent(&b, 0) == 0);
    assert!(ra.events().is_empty() && rb.events().is_empty());
    job.assert_clean();
}

#[test]
fn without_single_copy_a_large_message_goes_through_the_cells() {
    let job = Job::new(2);
    let (a, ra) = job.module(0);
    let (mut b, _rb) = job.module(1);
    connect(&[&a, &b]);
    b.vcs[0].get_mut().unwrap().single_copy = false;
    let msg = message(3 << 20, 1);
    let bytes = msg.as_bytes().to_vec();
    b.post_contig(
        0,
        header(FrameKind::Message, msg.len(), 1),
        SendData::Message(msg),
    )
    .unwrap();
    assert!(lent(&b, 0) == 0);
    poll_until(&[&a, &b], || ra.count() == 1);
    let got = lock(&ra.got);
    assert!(got[0].as_message, "reassembled into a message buffer");
    assert_eq!(
        a.lmt_reads.load(Ordering::SeqCst),
        0,
        "not read in one copy"
    );
    assert_eq!(got[0].header.kind, FrameKind::Message);
    assert!(got[0].body == bytes);
    drop(got);
    a.finalize();
    drop(b);
    job.assert_clean();
}

#[test]
fn a_large_message_keeps_its_place_among_the_frames() {
    let (job, (a, ra), (b, _rb)) = pair();
    // Fill the ring so that what follows is queued, then packed together.
    let fill = b
        .istart_contig(
            0,
            header(FrameKind::Control, 2 * CELLS * CELL_DATA, 1),
            SendData::Bytes(vec![1; 2 * CELLS * CELL_DATA]),
        )
        .unwrap();
    assert!(fill.is_some());
    let msg = message(LMT_MIN, 2);
    b.post_contig(
        0,
        header(FrameKind::Message, msg.len(), 2),
        SendData::Message(msg),
    )
    .unwrap();
    b.post_contig(
        0,
        header(FrameKind::Control, 5, 3),
        SendData::Bytes(b"small".to_vec()),
    )
    .unwrap();
    b.flush_all();
    poll_until(&[&a, &b], || ra.count() == 3);
    let tags: Vec<u32> = lock(&ra.got).iter().map(|g| g.header.tag).collect();
    assert_eq!(
        tags,
        [1, 2, 3],
        "frames from one thread arrive in the order sent"
    );
    job.assert_clean();
}

/// Posts a message of `len` bytes tagged `tag` from `from` to `to`, and
/// returns its bytes.
fn post_message(from: &ShmModule, to: usize, len: usize, tag: u32) -> Vec<u8> {
    let msg = message(len, tag);
    let bytes = msg.as_bytes().to_vec();
    from.post_contig(
        to,
        header(FrameKind::Message, len, tag),
        SendData::Message(msg),
    )
    .unwrap();
    bytes
}

/// Posts a small Control frame tagged `tag` from `from` to `to`.
fn post_small(from: &ShmModule, to: usize, tag: u32) {
    from.post_contig(
        to,
        header(FrameKind::Control, 5, tag),
        SendData::Bytes(b"small".to_vec()),
    )
    .unwrap();
    from.flush_all();
}

#[test]
fn put_mode_writes_a_large_message_into_the_receivers_buffer_in_its_place() {
    let (job, (a, ra), (b, rb)) = pair_in(Mode::Put);
    let mut want = Vec::new();
    for (i, len) in [LMT_MIN, (5 << 20) + 3, MAX_PAYLOAD]
        .into_iter()
        .enumerate()
    {
        let tag = 2 * i as u32;
        let bytes = post_message(&b, 0, len, tag);
        // Only the RTS goes before the CTS: what follows waits.
        post_small(&b, 0, tag + 1);
        assert!(lent(&b, 0) > 0, "lent until written");
        assert_eq!(cells_in(&a, 1), 1, "the RTS alone is in the ring");
        assert!(b.backlog(0) > len, "the message and the small frame count");
        poll_until(&[&a, &b], || ra.count() == 2 * i + 2);
        let got = lock(&ra.got);
        let (big, small) = (&got[2 * i], &got[2 * i + 1]);
        assert!(big.as_message, "handed up as a message");
        assert_eq!(
            big.header,
            FrameHeader {
                kind: FrameKind::Message,
                flags: 0,
                len: len as u32,
                src: 7,
                tag
            }
        );
        assert!(big.body == bytes, "{len} bytes arrive whole");
        assert_eq!(
            (small.header.tag, &small.body[..]),
            (tag + 1, &b"small"[..])
        );
        want.push(tag);
    }
    assert_eq!(
        b.lmt_writes.load(Ordering::SeqCst),
        3,
        "written in one copy"
    );
    assert_eq!(a.lmt_reads.load(Ordering::SeqCst), 0, "none read");
    poll_until(&[&a, &b], || b.backlog(0) == 0);
    assert!(lent(&b, 0) == 0);
    let receiver = a.vc(1).unwrap();
    assert!(!receiver.lmt.receiving() && !receiver.receiving_put.load(Ordering::Relaxed));
    assert!(ra.events().is_empty() && rb.events().is_empty());
    job.assert_clean();
}

#[test]
fn put_transfers_queue_behind_one_another_and_both_ways_at_once() {
    for mode in [Mode::Put, Mode::Cooperative] {
        let (job, (a, ra), (b, rb)) = pair_in(mode);
        // Each side sends two large messages and a small frame to the
        // other before either has polled: both wait for a CTS the other
        // must send while waiting itself, and the small frame waits behind
        // them.
        let mut want = Vec::new();
        for (from, to) in [(&a, 1), (&b, 0)] {
            let first = post_message(from, to, LMT_MIN + 1, 1);
            let second = post_message(from, to, 2 * LMT_MIN, 2);
            post_small(from, to, 3);
            want.push((first, second));
        }
        poll_until(&[&a, &b], || ra.count() == 3 && rb.count() == 3);
        for (rec, (first, second)) in [&rb, &ra].into_iter().zip(&want) {
            let got = lock(&rec.got);
            let tags: Vec<u32> = got.iter().map(|g| g.header.tag).collect();
            assert_eq!(tags, [1, 2, 3], "{mode:?}: in the order posted");
            assert!(got[0].body == *first && got[1].body == *second);
        }
        let writes = if mode == Mode::Put { 2 } else { 0 };
        assert_eq!(a.lmt_writes.load(Ordering::SeqCst), writes);
        assert_eq!(b.lmt_writes.load(Ordering::SeqCst), writes);
        assert!(ra.events().is_empty() && rb.events().is_empty());
        job.assert_clean();
    }
}

#[test]
fn a_put_in_flight_holds_terminate_until_it_is_done() {
    let (job, (a, ra), (b, rb)) = pair_in(Mode::Put);
    let bytes = post_message(&b, 0, LMT_MIN, 4);
    b.vc_terminate(0);
    a.vc_terminate(1);
    assert!(rb.events().is_empty(), "the message is still lent");
    poll_until(&[&a, &b], || {
        rb.events() == ["terminated 0"] && ra.events() == ["terminated 1"]
    });
    // Its DONE went before the sender's side closed.
    poll_until(&[&a], || ra.count() == 1);
    assert!(lock(&ra.got)[0].body == bytes);
    job.assert_clean();
}

#[test]
fn cooperative_mode_moves_a_large_message_through_the_cells() {
    let (job, (a, ra), (b, _rb)) = pair_in(Mode::Cooperative);
    let bytes = post_message(&b, 0, 3 << 20, 5);
    assert!(
        lent(&b, 0) > 0,
        "lent until the receiver said clear to send"
    );
    poll_until(&[&a, &b], || ra.count() == 1);
    assert_eq!(lent(&b, 0), 0);
    assert!(lock(&ra.got)[0].as_message && lock(&ra.got)[0].body == bytes);
    assert_eq!(a.lmt_reads.load(Ordering::SeqCst), 0);
    assert_eq!(b.lmt_writes.load(Ordering::SeqCst), 0);
    job.assert_clean();
}

#[test]
fn put_packets_out_of_turn_are_reported_naming_the_peer() {
    let lmt = |m: &ShmModule, kind: FrameKind, body: Vec<u8>| {
        m.istart_contig(
            if m.me == 0 { 1 } else { 0 },
            header(kind, body.len(), 0),
            SendData::Bytes(body),
        )
        .unwrap();
    };
    // A CTS, a DONE and a cookie change for transfers this process does
    // not send.
    for (kind, body, why) in [
        (
            FrameKind::LmtCts,
            cookie(8, 4096, 3),
            "clear to send transfer 3, which this process is not sending",
        ),
        (
            FrameKind::LmtDone,
            5u64.to_le_bytes().to_vec(),
            "done with transfer 5, which this process is not sending",
        ),
        (
            FrameKind::LmtCookie,
            cookie(8, 4096, 3),
            "a cookie for transfer 3, which this process is not sending",
        ),
    ] {
        let (job, (a, ra), (b, _rb)) = pair_in(Mode::Put);
        lmt(&b, kind, body);
        assert_eq!(
            first_event(&a, &ra),
            format!("failed 1: malformed data from process 1: {why}")
        );
        job.assert_clean();
    }
    // Another frame between a Put's RTS and its DONE.
    let (job, (a, ra), (b, _rb)) = pair_in(Mode::Put);
    lmt(&b, FrameKind::LmtRts, cookie(0, 4096, 1));
    lmt(&b, FrameKind::Control, vec![1, 2]);
    assert_eq!(
        first_event(&a, &ra),
        "failed 1: malformed data from process 1: a Control frame in the middle of a Put transfer"
    );
    job.assert_clean();
    // A CTS of the wrong length, and one into memory the receiver does not
    // have: the sender refuses before writing, then fails to write.
    for (addr, len, why) in [
        (
            8,
            5,
            format!(
                "malformed data from process 0: clear to send transfer 1 into 5 bytes, for a message of {LMT_MIN}"
            ),
        ),
        (
            8,
            LMT_MIN as u64,
            format!(
                "cannot write a large message into process 0 (pid {})",
                std::process::id()
            ),
        ),
    ] {
        let (job, (a, _ra), (b, rb)) = pair_in(Mode::Put);
        post_message(&b, 0, LMT_MIN, 1);
        // The first transfer of process 1: id 1.
        lmt(&a, FrameKind::LmtCts, cookie(addr, len, 1));
        poll_until(&[&b], || !rb.events().is_empty());
        let e = &rb.events()[0];
        assert!(e.starts_with(&format!("failed 0: {why}")), "{e}");
        job.assert_clean();
    }
}

// ---------------------------------------------------------------------------
// Full rings, flow control

#[test]
fn a_full_ring_holds_the_sender_until_the_receiver_reads() {
    let (job, (a, ra), (b, _rb)) = pair();
    let big = CELLS * CELL_DATA;
    let mut reqs = Vec::new();
    for i in 0..3u32 {
        reqs.push(
            b.istart_contig(
                0,
                header(FrameKind::Control, big, i),
                SendData::Bytes(pattern(i, big)),
            )
            .unwrap()
            .expect("does not fit"),
        );
    }
    for i in 3..13u32 {
        b.istart_contig(
            0,
            header(FrameKind::Control, 7, i),
            SendData::Bytes(pattern(i, 7)),
        )
        .unwrap();
    }
    assert_eq!(cells_in(&a, 1), CELLS as u64, "the ring is full");
    assert_eq!(
        inbound(&a, 1).ring().waiting().load(Ordering::SeqCst),
        1,
        "the sender asked to be woken"
    );
    assert!(b.has_queued());
    let backlog = b.backlog(0);
    assert_eq!(
        backlog,
        3 * (big + FRAME_HEADER_SIZE) + 10 * (7 + FRAME_HEADER_SIZE) - CELLS * CELL_DATA
    );
    assert!(
        !b.poll(PollDir::OutFirst, Some(Duration::from_millis(10)))
            .unwrap()
    );
    assert!(!b.flush_all());
    assert_eq!(
        b.backlog(0),
        backlog,
        "nothing moves while the ring is full"
    );
    assert_eq!(ra.count(), 0);
    poll_until(&[&a, &b], || ra.count() == 13);
    for (i, g) in lock(&ra.got).iter().enumerate() {
        assert_eq!(g.header.tag, i as u32);
        assert!(g.body == pattern(i as u32, if i < 3 { big } else { 7 }));
    }
    assert!(reqs.iter().all(|r| r.is_complete()));
    assert_eq!(b.backlog(0), 0);
    job.assert_clean();
}

/// Both processes have a progress thread polling with `timeout` (`None`:
/// sleeping in `poll` whenever there is nothing to do); the stream from 1
/// to 0 (and from 0 to 1 if `both_ways`) is many times the ring. Nothing is
/// lost and nobody sleeps forever (an error after `hang`, describing the
/// state).
fn run_streams_through_progress_threads(
    timeout: Option<Duration>,
    rounds: u32,
    size: usize,
    both_ways: bool,
    hang: Duration,
) -> Result<(), String> {
    let (job, (a, ra), (b, rb)) = pair();
    let stop = Arc::new(AtomicBool::new(false));
    let threads = vec![
        progress_thread(&a, &stop, timeout),
        progress_thread(&b, &stop, timeout),
    ];
    let body = pattern(0, size);
    let back = if both_ways { rounds } else { 0 };
    for i in 0..rounds {
        b.istart_contig(
            0,
            header(FrameKind::Control, size, i),
            SendData::Bytes(body.clone()),
        )
        .unwrap();
        if both_ways {
            a.istart_contig(
                1,
                header(FrameKind::Control, size / 2, i),
                SendData::Bytes(body[..size / 2].to_vec()),
            )
            .unwrap();
        }
    }
    let end = Instant::now() + hang;
    while (ra.count() as u32) < rounds || (rb.count() as u32) < back {
        if Instant::now() >= end {
            let state = format!(
                "hung: 0 got {} of {rounds} frames, 1 got {} of {back}; 1 has {} bytes queued for 0, its ring in 0 holds {} cells (waiting flag {}), 0 has {} bytes queued for 1",
                ra.count(),
                rb.count(),
                b.backlog(0),
                cells_in(&a, 1),
                inbound(&a, 1).ring().waiting().load(Ordering::SeqCst),
                a.backlog(1),
            );
            stop_threads(&[&a, &b], &stop, threads);
            return Err(state);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    stop_threads(&[&a, &b], &stop, threads);
    for (r, len) in [(&ra, size), (&rb, size / 2)] {
        for (i, g) in lock(&r.got).iter().enumerate() {
            assert_eq!(g.header.tag, i as u32);
            assert!(g.body[..] == body[..len]);
        }
    }
    job.assert_clean();
    Ok(())
}

#[test]
fn progress_threads_move_streams_larger_than_the_ring() {
    // Polls that time out: a lost wake-up (see the next test) only delays.
    let size = CELLS * CELL_DATA + CELL_DATA / 3;
    let poll = Some(Duration::from_millis(2));
    run_streams_through_progress_threads(poll, 8, size, true, HANG).unwrap();
    run_streams_through_progress_threads(poll, 8, 3 << 20, false, HANG).unwrap();
}

#[test]
fn sleeping_progress_threads_never_deadlock_on_a_full_ring() {
    for attempt in 0..20 {
        if let Err(e) =
            run_streams_through_progress_threads(None, 16, 4 << 20, false, Duration::from_secs(10))
        {
            panic!("attempt {attempt}: {e}");
        }
    }
}

#[test]
fn a_full_layer_above_leaves_the_cells_in_the_ring_until_resumed() {
    let (job, (a, ra), (b, _rb)) = pair();
    ra.limit.store(0, Ordering::SeqCst);
    for i in 0..5u32 {
        let len = if i == 2 { 100 << 10 } else { 10 };
        b.istart_contig(
            0,
            header(FrameKind::Control, len, i),
            SendData::Bytes(pattern(i, len)),
        )
        .unwrap();
    }
    let cells = cells_in(&a, 1);
    assert!(cells >= 5);
    for _ in 0..3 {
        a.poll(PollDir::InFirst, Some(Duration::from_millis(2)))
            .unwrap();
        assert!(!a.try_progress());
    }
    assert_eq!(ra.count(), 0, "no room: nothing read");
    assert_eq!(cells_in(&a, 1), cells, "the cells stay in the ring");
    // Room for two frames (one cell each): the reader stops after them.
    ra.limit.store(2, Ordering::SeqCst);
    a.resume_receiving();
    assert!(a.try_progress());
    assert_eq!(ra.count(), 2);
    assert_eq!(cells_in(&a, 1), cells - 2);
    // Room again: everything.
    ra.limit.store(usize::MAX, Ordering::SeqCst);
    a.resume_receiving();
    a.try_progress();
    assert_eq!(ra.count(), 5);
    assert_eq!(cells_in(&a, 1), 0);
    for (i, g) in lock(&ra.got).iter().enumerate() {
        assert!(g.body == pattern(i as u32, if i == 2 { 100 << 10 } else { 10 }));
    }
    job.assert_clean();
}

// ---------------------------------------------------------------------------
// Malformed input

/// Writes one cell into the ring `b` writes in process `peer`'s segment,
/// by hand: length word `len`, then `bytes`.
fn write_cell(b: &ShmModule, peer: usize, len: u32, bytes: &[u8]) {
    let vc = b.vc(peer).unwrap();
    let _producer = lock(&vc.send);
    let ring = vc.out.get().expect("connected").ring();
    let tail = vc.tail.load(Ordering::SeqCst);
    assert!(tail - ring.head().load(Ordering::SeqCst) < CELLS as u64);
    assert!(bytes.len() <= CELL_DATA);
    ring.fill(tail, |cell| {
        // SAFETY: the cell is the producer's (checked above), and `bytes`
        // fits.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), cell, bytes.len()) }
    });
    let slot = Ring::slot(tail);
    ring.len(slot).store(len, Ordering::SeqCst);
    ring.seq(slot).store(ring::seq_of(tail), Ordering::SeqCst);
    vc.tail.store(tail + 1, Ordering::SeqCst);
}

/// Polls `a` until it reports an event; returns the first.
fn first_event(a: &ShmModule, ra: &Record) -> String {
    poll_until(&[a], || !ra.events().is_empty());
    ra.events()[0].clone()
}

#[test]
fn a_cell_longer_than_a_cell_is_reported_naming_the_peer() {
    let (job, (a, ra), (b, _rb)) = pair();
    write_cell(&b, 0, CELL_DATA as u32 + 1, &[]);
    assert_eq!(
        first_event(&a, &ra),
        format!(
            "failed 1: malformed data from process 1: a cell of {} bytes (at most {CELL_DATA})",
            CELL_DATA + 1
        )
    );
    write_cell(&b, 0, u32::MAX, &[]);
    poll_until(&[&a], || ra.events().len() == 2);
    assert!(ra.events()[1].starts_with("failed 1: malformed data from process 1: a cell of"));
    assert_eq!(ra.count(), 0);
    job.assert_clean();
}

#[test]
fn garbage_in_a_cell_is_reported_naming_the_peer() {
    let (job, (a, ra), (b, _rb)) = pair();
    let garbage = b"GET / HTTP/1.1\r\n\r\n";
    write_cell(&b, 0, garbage.len() as u32, garbage);
    let e = first_event(&a, &ra);
    assert!(
        e.starts_with("failed 1: malformed data from process 1: bad frame magic"),
        "{e}"
    );
    assert_eq!(ra.count(), 0);
    job.assert_clean();
}

#[test]
fn a_frame_too_long_for_the_receiver_is_reported() {
    let (job, (a, ra), (b, _rb)) = pair();
    let h = header(FrameKind::Control, MAX_PAYLOAD + 1, 0).encode();
    write_cell(&b, 0, h.len() as u32, &h);
    let e = first_event(&a, &ra);
    assert!(
        e.starts_with("failed 1: malformed data from process 1: frame of"),
        "{e}"
    );
    job.assert_clean();
}

#[test]
fn done_with_a_message_never_lent_is_reported() {
    let (job, (a, ra), (b, _rb)) = pair();
    b.istart_contig(
        0,
        header(FrameKind::LmtDone, 8, 0),
        SendData::Bytes(998u64.to_le_bytes().to_vec()),
    )
    .unwrap();
    assert_eq!(
        first_event(&a, &ra),
        "failed 1: malformed data from process 1: done with transfer 998, which this process is not sending"
    );
    job.assert_clean();
}

#[test]
fn lmt_packets_of_the_wrong_size_are_reported() {
    let (job, (a, ra), (b, _rb)) = pair();
    b.istart_contig(
        0,
        header(FrameKind::LmtRts, 8, 0),
        SendData::Bytes(vec![0; 8]),
    )
    .unwrap();
    assert_eq!(
        first_event(&a, &ra),
        "failed 1: malformed data from process 1: a LmtRts packet of 8 bytes"
    );
    job.assert_clean();
}

fn cookie(addr: u64, len: u64, id: u64) -> Vec<u8> {
    [addr, len, id]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

#[test]
fn a_cookie_pointing_at_unmapped_memory_is_reported() {
    let (job, (a, ra), (b, _rb)) = pair();
    // Two pages, the second unmapped: the read gets one page, then fails.
    // SAFETY: sysconf with an integer argument only.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh private mapping nothing else refers to.
    let base = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            2 * page,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .unwrap();
    // SAFETY: the second page of the mapping just made.
    unsafe { rustix::mm::munmap(base.cast::<u8>().add(page).cast(), page) }.unwrap();
    for (i, (addr, len)) in [(base as u64, 2 * page), (base as u64 + page as u64, page)]
        .into_iter()
        .enumerate()
    {
        b.istart_contig(
            0,
            header(FrameKind::LmtRts, COOKIE_LEN, 0),
            SendData::Bytes(cookie(addr, len as u64, 4)),
        )
        .unwrap();
        poll_until(&[&a], || ra.events().len() == i + 1);
        let e = &ra.events()[i];
        assert!(
            e.starts_with(&format!(
                "failed 1: cannot read a large message from process 1 (pid {})",
                std::process::id()
            )),
            "{e}"
        );
    }
    // SAFETY: the first page, mapped above and no longer used.
    unsafe { rustix::mm::munmap(base, page) }.unwrap();
    assert_eq!(ra.count(), 0);
    assert_eq!(cells_in(&b, 0), 0, "no LmtDone for a failed read");
    // A length beyond the receiver's limit is refused before reading.
    b.istart_contig(
        0,
        header(FrameKind::LmtRts, COOKIE_LEN, 0),
        SendData::Bytes(cookie(8, MAX_PAYLOAD as u64 + 1, 6)),
    )
    .unwrap();
    poll_until(&[&a], || ra.events().len() == 3);
    assert_eq!(
        ra.events()[2],
        format!(
            "failed 1: malformed data from process 1: a large message of {} bytes (at most {MAX_PAYLOAD})",
            MAX_PAYLOAD + 1
        )
    );
    job.assert_clean();
}

// ---------------------------------------------------------------------------
// Start-up

#[test]
fn bad_cards_are_refused_naming_the_peer() {
    let job = Job::new(2);
    let (a, _ra) = job.module(0);
    let (b, _rb) = job.module(1);
    let pid = std::process::id();
    for card in [
        "tcp:127.0.0.1:5000".to_string(),
        "shm:/x".into(),
        format!("shm:{}:{pid}", segment_name(job.tag, 0)),
        format!("shm:{}:{pid}:1:2", segment_name(job.tag, 0)),
        format!("shm:{}:pid:1", segment_name(job.tag, 0)),
        format!("shm:{}:{pid}:-1", segment_name(job.tag, 0)),
    ] {
        let e = b.vc_init(0, &card).unwrap_err();
        assert_eq!(e.peer, Some(0));
        assert_eq!(
            e.to_string(),
            format!("process 0: shm: `{card}` is no shm business card")
        );
    }
    // Another job's segment.
    let other = Job::new(2);
    let (c, _rc) = other.module(0);
    let e = b.vc_init(0, &c.business_card()).unwrap_err();
    assert_eq!(e.peer, Some(0));
    assert!(
        e.to_string().starts_with(&format!(
            "process 0: shm: card names segment {}, expected that of process 0 of this job",
            segment_name(other.tag, 0)
        )),
        "{e}"
    );
    // Process 1's card given as process 0's.
    let e = a.vc_init(1, &a.business_card()).unwrap_err();
    assert_eq!(e.peer, Some(1));
    assert!(e.to_string().contains("expected that of process 1"), "{e}");
    c.unlink();
    other.assert_clean();
    assert!(
        a.connected_peers().is_empty() && b.connected_peers().is_empty(),
        "no VC was made"
    );
    assert_eq!(a.own.u64_at(OFF_ANNOUNCED).load(Ordering::SeqCst), 0);
    a.unlink();
    b.unlink();
    job.assert_clean();
}

#[test]
fn a_missing_or_foreign_segment_is_refused_naming_the_peer() {
    let job = Job::new(2);
    let (b, _rb) = job.module(1);
    let card = format!("shm:{}:{}:0", segment_name(job.tag, 0), std::process::id());
    let e = b.vc_init(0, &card).unwrap_err();
    assert_eq!(e.peer, Some(0));
    assert!(
        e.to_string().starts_with(&format!(
            "process 0: shm: cannot open {}",
            segment_name(job.tag, 0)
        )),
        "{e}"
    );
    // A segment of a job of another size (its header says so).
    let three = Job::tagged(job.tag, 3);
    let (a3, _ra3) = three.module(0);
    let e = b.vc_init(0, &a3.business_card()).unwrap_err();
    assert_eq!(e.peer, Some(0));
    assert!(
        e.to_string().ends_with(&format!(
            "segment {} is not process 0's of this job",
            segment_name(job.tag, 0)
        )),
        "{e}"
    );
    a3.unlink();
    drop(a3);
    // The right size and name, but not a segment of this job (its header).
    let (a, _ra) = job.module(0);
    // SAFETY: the header's magic, which nobody else reads now.
    unsafe { *a.own.base = b'X' };
    let e = b.vc_init(0, &a.business_card()).unwrap_err();
    assert_eq!(e.peer, Some(0));
    assert!(
        e.to_string().ends_with(&format!(
            "segment {} is not process 0's of this job",
            segment_name(job.tag, 0)
        )),
        "{e}"
    );
    assert!(b.connected_peers().is_empty(), "no VC was made");
    assert_eq!(a.own.u64_at(OFF_ANNOUNCED).load(Ordering::SeqCst), 0);
    a.unlink();
    b.unlink();
    job.assert_clean();
}

#[test]
fn a_process_beyond_the_job_is_refused_not_a_panic() {
    let job = Job::new(2);
    let guard = Job::tagged(job.tag, 3);
    let (b, _rb) = job.module(1);
    // A process 2 of this job's tag and size (a process outside the
    // initial set, as `connect_to_root` is for).
    let c = ShmModule::init(2, 2, job.tag, job.tag, MAX_PAYLOAD).unwrap();
    let card = c.business_card();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.connect_to_root(2, &card)));
    c.unlink();
    b.unlink();
    guard.assert_clean();
    let e = r.expect("connect_to_root panicked").unwrap_err();
    assert_eq!(e.peer, Some(2));
}

/// `accept_peers` has nothing to wait for; a segment's name stays while
/// its module lives (a peer may map it at any time), and goes when it is
/// finalized or dropped.
#[test]
fn accept_peers_returns_at_once_and_the_name_stays_until_the_end() {
    let job = Job::new(3);
    let (a, _ra) = job.module(0);
    let (b, _rb) = job.module(1);
    b.vc_init(0, &a.business_card()).unwrap();
    // Process 2 never came: no wait, no error.
    a.accept_peers(&[1, 2], Instant::now()).unwrap();
    b.accept_peers(&[0, 2], Instant::now()).unwrap();
    assert_eq!((a.leftovers_of(&job), b.leftovers_of(&job)), (1, 1));
    // A peer that comes late still connects.
    let (c, _rc) = job.module(2);
    c.vc_init(0, &a.business_card()).unwrap();
    assert_eq!(a.connected_peers(), [1, 2]);
    drop(a);
    assert_eq!(b.leftovers_of(&job), 1);
    b.finalize();
    drop(c);
    job.assert_clean();
}

impl ShmModule {
    /// How many of `job`'s names in `/dev/shm` are this module's (0 or 1).
    fn leftovers_of(&self, job: &Job) -> usize {
        let mine = self.name.trim_start_matches('/');
        job.leftovers().iter().filter(|n| *n == mine).count()
    }
}

#[test]
fn finalize_removes_the_name() {
    let job = Job::new(2);
    let (a, _ra) = job.module(0);
    assert_eq!(a.leftovers_of(&job), 1);
    a.finalize();
    a.finalize();
    job.assert_clean();
}

// ---------------------------------------------------------------------------
// Termination

#[test]
fn terminate_completes_after_pending_sends_drain() {
    let (job, (a, ra), (b, rb)) = pair();
    let big = pattern(1, 3 << 20);
    let queued = b
        .istart_contig(
            0,
            header(FrameKind::Control, big.len(), 1),
            SendData::Bytes(big.clone()),
        )
        .unwrap()
        .expect("3 MiB does not fit in the ring");
    b.vc_terminate(0);
    assert!(
        rb.events().is_empty(),
        "terminate does not block or finish early"
    );
    let small = || header(FrameKind::Control, 0, 0);
    let refused = [
        b.istart_contig(0, small(), SendData::Bytes(vec![]))
            .map(|_| ()),
        b.isend_contig(0, SendRequest::new(), small(), SendData::Bytes(vec![])),
        b.send_noncontig(0, SendRequest::new(), small(), &[]),
        b.post_contig(0, small(), SendData::Bytes(vec![]))
            .map(|_| ()),
    ];
    for r in refused {
        assert_eq!(r.unwrap_err().peer, Some(0), "no sends after terminate");
    }
    poll_until(&[&a, &b], || rb.events() == ["terminated 0"]);
    assert!(queued.is_complete());
    poll_until(&[&a], || ra.count() == 1);
    assert!(lock(&ra.got)[0].body == big);
    // Nothing pending: terminated at once; and only once.
    a.vc_terminate(1);
    assert_eq!(ra.events(), ["terminated 1"]);
    a.vc_terminate(1);
    b.vc_terminate(0);
    a.poll(PollDir::InFirst, Some(Duration::from_millis(1)))
        .unwrap();
    b.poll(PollDir::InFirst, Some(Duration::from_millis(1)))
        .unwrap();
    assert_eq!(ra.events(), ["terminated 1"]);
    assert_eq!(rb.events(), ["terminated 0"]);
    job.assert_clean();
}

// ---------------------------------------------------------------------------
// Sleeping and waking

#[test]
fn a_poll_asleep_on_the_futex_returns_when_a_frame_arrives() {
    let (job, (a, ra), (b, _rb)) = pair();
    let (tx, rx) = mpsc::channel();
    let (a2, ra2) = (Arc::clone(&a), Arc::clone(&ra));
    let t = std::thread::spawn(move || {
        let mut polls = 0;
        while ra2.count() == 0 {
            a2.poll(PollDir::InFirst, None).unwrap();
            polls += 1;
        }
        tx.send(polls).unwrap();
    });
    wait_until("the poll to sleep", || {
        a.own.u32_at(OFF_SLEEPING).load(Ordering::SeqCst) == 1
    });
    b.istart_contig(
        0,
        header(FrameKind::Control, 5, 1),
        SendData::Bytes(b"hello".to_vec()),
    )
    .unwrap();
    let woke = rx.recv_timeout(HANG);
    if woke.is_err() {
        a.wake();
    }
    t.join().unwrap();
    assert!(woke.is_ok(), "the poll slept through the frame");
    assert_eq!(lock(&ra.got)[0].body, b"hello");
    job.assert_clean();
}

/// Runs `a.poll(None)` on another thread; true if it returned within the
/// hang guard (else wakes it to end the thread).
fn poll_returns(a: &Arc<ShmModule>, before: impl FnOnce()) -> bool {
    let (tx, rx) = mpsc::channel();
    let a2 = Arc::clone(a);
    let t = std::thread::spawn(move || {
        a2.poll(PollDir::InFirst, None).unwrap();
        tx.send(()).unwrap();
    });
    before();
    let back = rx.recv_timeout(HANG).is_ok();
    if !back {
        a.wake();
    }
    t.join().unwrap();
    back
}

#[test]
fn a_wake_before_the_poll_is_not_lost() {
    let (job, (a, _ra), _b) = pair();
    a.wake();
    assert!(poll_returns(&a, || {}), "the wake came first, and was lost");
    // Several wakes before a poll.
    a.wake();
    a.wake();
    assert!(poll_returns(&a, || {}));
    job.assert_clean();
}

#[test]
fn a_wake_from_another_thread_ends_a_blocked_poll() {
    let (job, (a, _ra), _b) = pair();
    for _ in 0..3 {
        // A wake that ended a wait is kept for the next poll too (a spurious
        // return, harmless): take it, so that the next poll sleeps.
        a.poll(PollDir::InFirst, Some(Duration::from_millis(1)))
            .unwrap();
        let a2 = Arc::clone(&a);
        assert!(poll_returns(&a, move || {
            wait_until("the poll to sleep", || {
                a2.own.u32_at(OFF_SLEEPING).load(Ordering::SeqCst) == 1
            });
            let a3 = Arc::clone(&a2);
            std::thread::spawn(move || a3.wake()).join().unwrap();
        }));
    }
    // resume_receiving wakes too.
    a.poll(PollDir::InFirst, Some(Duration::from_millis(1)))
        .unwrap();
    let a2 = Arc::clone(&a);
    assert!(poll_returns(&a, move || {
        wait_until("the poll to sleep", || {
            a2.own.u32_at(OFF_SLEEPING).load(Ordering::SeqCst) == 1
        });
        a2.resume_receiving();
    }));
    job.assert_clean();
}

#[test]
fn many_sending_threads_keep_each_threads_order() {
    let (job, (a, ra), (b, rb)) = pair();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![
        progress_thread(&a, &stop, Some(Duration::from_millis(5))),
        progress_thread(&b, &stop, Some(Duration::from_millis(5))),
    ];
    // An idle PE of process 0 taking frames off the rings as well.
    {
        let (a, stop) = (Arc::clone(&a), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                a.try_progress();
                std::thread::yield_now();
            }
        }));
    }
    const SENDERS: u32 = 4;
    const EACH: u32 = 300;
    let senders: Vec<_> = (0..SENDERS)
        .map(|t| {
            let b = Arc::clone(&b);
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let tag = t << 16 | i;
                    let len = (i as usize * 997) % (3 * CELL_DATA);
                    let h = header(FrameKind::Control, len, tag);
                    let body = SendData::Bytes(pattern(tag, len));
                    match i % 3 {
                        0 => drop(b.istart_contig(0, h, body).unwrap()),
                        1 => b.isend_contig(0, SendRequest::new(), h, body).unwrap(),
                        _ => drop(b.post_contig(0, h, body).unwrap()),
                    }
                    if i % 10 == 0 {
                        b.flush_all();
                    }
                }
                b.flush_all();
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let end = Instant::now() + HANG;
    while ra.count() < (SENDERS * EACH) as usize && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop_threads(&[&a, &b], &stop, threads);
    let got = lock(&ra.got);
    assert_eq!(got.len(), (SENDERS * EACH) as usize, "frames lost or hung");
    let mut next = [0u32; SENDERS as usize];
    for g in got.iter() {
        let (t, i) = (g.header.tag >> 16, g.header.tag & 0xffff);
        assert_eq!(i, next[t as usize], "thread {t}'s frames out of order");
        next[t as usize] += 1;
        assert!(g.body == pattern(g.header.tag, g.header.len as usize));
    }
    assert!(ra.events().is_empty() && rb.events().is_empty());
    job.assert_clean();
}

/// A segment is named by the job's segment id, not its tag (segment
/// names are listable by anyone; the tag in the header is derived from the
/// job key), and a peer's card is checked against the id.
#[test]
fn a_segment_is_named_by_the_segment_id_not_the_tag() {
    // Names are 32 hex digits, one name telling nothing of another's.
    let names: Vec<String> = (0..3).map(|n| segment_name(0x5eed, n)).collect();
    assert!(names.iter().all(|n| n.len() == "/converse-".len() + 32));
    assert!(!names[1].contains("5eed") && names[0] != names[1]);
    let tag: u64 = 0x0123_4567_89ab_cdef ^ u64::from(std::process::id());
    let id: u64 = tag.rotate_left(17) ^ 0x5eed;
    let a = ShmModule::init(0, 2, tag, id, MAX_PAYLOAD).unwrap();
    let b = ShmModule::init(1, 2, tag, id, MAX_PAYLOAD).unwrap();
    let card = a.business_card();
    assert!(card.contains(&segment_name(id, 0)), "{card}");
    assert!(!card.contains(&segment_name(tag, 0)), "{card}");
    // A card naming the tag-derived segment is refused by a peer.
    let forged = card.replace(&segment_name(id, 0), &segment_name(tag, 0));
    let refused = b.vc_init(0, &forged);
    let accepted = b.vc_init(0, &card);
    a.unlink();
    b.unlink();
    let e = refused.unwrap_err();
    assert!(e.to_string().contains("expected that of process 0"), "{e}");
    accepted.expect("the real card is accepted");
}

/// Upcalls that note, for every frame handed up, whether a watched send
/// request was complete at that moment.
struct SeesRequest {
    req: Mutex<Option<SendRequest>>,
    seen: Mutex<Vec<bool>>,
}

impl Upcalls for SeesRequest {
    fn frame(&self, _peer: usize, _header: FrameHeader, _body: Vec<u8>) {
        let done = lock(&self.req)
            .as_ref()
            .is_some_and(SendRequest::is_complete);
        lock(&self.seen).push(done);
    }
    fn vc_terminated(&self, _peer: usize) {}
    fn vc_failed(&self, peer: usize, why: String) {
        panic!("VC to {peer} failed: {why}");
    }
}

/// `poll(OutFirst)` sends what is queued before it hands up what arrived;
/// `poll(InFirst)` the other way round (the spec's `in_or_out`).
#[test]
fn poll_honours_its_direction() {
    for (dir, sent_first) in [(PollDir::OutFirst, true), (PollDir::InFirst, false)] {
        let job = Job::new(2);
        let a = ShmModule::init(0, 2, job.tag, job.tag, MAX_PAYLOAD).unwrap();
        let b = ShmModule::init(1, 2, job.tag, job.tag, MAX_PAYLOAD).unwrap();
        let sees = Arc::new(SeesRequest {
            req: Mutex::new(None),
            seen: Mutex::new(Vec::new()),
        });
        a.set_upcalls(sees.clone());
        let rb = Record::new();
        b.set_upcalls(rb.clone());
        connect(&[&a, &b]);
        // A frame from a to b larger than b's ring: part of it waits in a.
        let big = CELLS * CELL_DATA + 100;
        let req = a
            .istart_contig(
                1,
                header(FrameKind::Control, big, 0),
                SendData::Bytes(pattern(0, big)),
            )
            .unwrap()
            .expect("does not fit at once");
        *lock(&sees.req) = Some(req.clone());
        // b takes what is in its ring (room again for the rest), then
        // sends a a frame.
        assert!(b.try_progress());
        assert!(!req.is_complete());
        b.istart_contig(
            0,
            header(FrameKind::Control, 8, 1),
            SendData::Bytes(pattern(1, 8)),
        )
        .unwrap();
        assert!(a.poll(dir, Some(Duration::from_millis(100))).unwrap());
        assert_eq!(
            *lock(&sees.seen),
            [sent_first],
            "{dir:?}: was the queued send done when the arrival was handed up?"
        );
        poll_until(&[&a, &b], || rb.count() == 1 && req.is_complete());
        drop((a, b));
        job.assert_clean();
    }
}

/// A terminated VC is used again after `vc_init` with the same card (the
/// spec's "may be used for communication again later"); another card is
/// refused.
#[test]
fn a_terminated_vc_is_used_again() {
    let (job, (a, ra), (b, rb)) = pair();
    let send = |from: &ShmModule, to: usize, tag: u32| {
        from.istart_contig(
            to,
            header(FrameKind::Control, 9, tag),
            SendData::Bytes(pattern(tag, 9)),
        )
        .unwrap();
    };
    send(&a, 1, 1);
    send(&b, 0, 2);
    poll_until(&[&a, &b], || ra.count() == 1 && rb.count() == 1);
    a.vc_terminate(1);
    b.vc_terminate(0);
    poll_until(&[&a, &b], || {
        ra.events() == ["terminated 1"] && rb.events() == ["terminated 0"]
    });
    assert!(
        a.istart_contig(
            1,
            header(FrameKind::Control, 1, 3),
            SendData::Bytes(vec![0])
        )
        .is_err(),
        "a terminated VC refuses sends"
    );
    assert!(
        a.vc_init(1, "shm:/converse-0-1:1:2").is_err(),
        "another card"
    );
    a.vc_init(1, &b.business_card()).unwrap();
    b.vc_init(0, &a.business_card()).unwrap();
    send(&a, 1, 4);
    send(&b, 0, 5);
    poll_until(&[&a, &b], || ra.count() == 2 && rb.count() == 2);
    assert_eq!(lock(&rb.got)[1].header.tag, 4);
    assert!(lock(&rb.got)[1].body == pattern(4, 9));
    assert_eq!(lock(&ra.got)[1].header.tag, 5);
    // And terminated again.
    a.vc_terminate(1);
    poll_until(&[&a], || ra.events().len() == 2);
    drop((a, b));
    job.assert_clean();
}

// ---------------------------------------------------------------------------
// VCs on first use

/// A job of `nodes` processes none of which is connected; each serves the
/// others' cards through `peer_card` (as the layer above does from the
/// bootstrap), from one map.
fn lazy_job(nodes: usize, mode: Mode) -> (Job, Vec<Side>) {
    let job = Job::new(nodes);
    let cards = Arc::new(Mutex::new(HashMap::new()));
    let sides: Vec<Side> = (0..nodes)
        .map(|me| {
            let m = ShmModule::init(me, nodes, job.tag, job.tag, MAX_PAYLOAD)
                .unwrap()
                .with_lmt_mode(mode);
            let rec = Record::serving(Arc::clone(&cards));
            m.set_upcalls(rec.clone());
            lock(&cards).insert(me, m.business_card());
            (Arc::new(m), rec)
        })
        .collect();
    lock(&job.made).extend(sides.iter().map(|(m, _)| Arc::clone(m)));
    (job, sides)
}

/// Rings `m` made in its own segment (one per peer it writes to).
fn rings_made(m: &ShmModule) -> usize {
    lock(&m.connecting).rings
}

/// Mappings of other processes' segments `m` made.
fn peer_mappings(m: &ShmModule) -> usize {
    m.peer_mappings.load(Ordering::SeqCst)
}

/// Runs `try_progress` on the modules until `done`, failing after
/// [`HANG`].
fn progress_until(mods: &[&ShmModule], done: impl Fn() -> bool) {
    let end = Instant::now() + HANG;
    while !done() {
        assert!(Instant::now() < end, "timed out");
        for m in mods {
            m.try_progress();
        }
    }
}

/// Sends frame `tag` of `len` bytes from `from` to `to` through send call
/// number `call % 4`.
fn send_by(from: &ShmModule, to: usize, call: u32, tag: u32, len: usize) {
    let body = pattern(tag, len);
    let h = header(FrameKind::Control, len, tag);
    match call % 4 {
        0 => drop(from.istart_contig(to, h, SendData::Bytes(body)).unwrap()),
        1 => from
            .isend_contig(to, SendRequest::new(), h, SendData::Bytes(body))
            .unwrap(),
        2 => {
            let (x, y) = body.split_at(len / 2);
            from.send_noncontig(to, SendRequest::new(), h, &[x, y])
                .unwrap()
        }
        _ => {
            from.post_contig(to, h, SendData::Bytes(body)).unwrap();
            from.flush_all();
        }
    }
}

#[test]
fn a_first_send_connects_by_the_card_the_layer_above_serves() {
    let (job, sides) = lazy_job(3, Mode::Get);
    let [(a, ra), (b, rb), (c, rc)] = &sides[..] else {
        unreachable!()
    };
    // Nothing is connected, and asking about a peer connects nothing.
    assert_eq!(b.backlog(0), 0);
    assert!(!b.has_queued() && !b.flush_all());
    assert!(b.connected_peers().is_empty());
    assert_eq!(
        (peer_mappings(b), rings_made(b), rb.card_calls(0)),
        (0, 0, 0)
    );
    // Process 1 sends to process 0, which never connected to it, through
    // every send call; the card is asked for once.
    let sizes = [0, 10, 1000, CELL_DATA + 5, 3 * CELL_DATA];
    for tag in 0..40u32 {
        send_by(b, 0, tag, tag, sizes[tag as usize % sizes.len()]);
    }
    assert_eq!(rb.card_calls(0), 1, "asked for once, not per send");
    assert_eq!(
        (peer_mappings(b), rings_made(b)),
        (1, 1),
        "0's header; a ring"
    );
    // The receiver lists the sender before it polled (it takes the
    // announcements first), and needs no card for it.
    assert_eq!(a.connected_peers(), [1]);
    assert_eq!(b.connected_peers(), [0]);
    poll_until(&[a, b], || ra.count() == 40);
    for (i, g) in lock(&ra.got).iter().enumerate() {
        let len = sizes[i % sizes.len()];
        assert_eq!((g.peer, g.header.tag), (1, i as u32));
        assert!(g.body == pattern(i as u32, len), "frame {i} garbled");
    }
    assert_eq!(ra.card_calls(1), 0, "a receiver needs no card");
    assert_eq!(
        (peer_mappings(a), rings_made(a)),
        (2, 0),
        "1's header and ring"
    );
    // The answer goes over a ring made from the sender's header.
    send_by(a, 1, 0, 99, 5);
    poll_until(&[a, b], || rb.count() == 1);
    assert_eq!(lock(&rb.got)[0].header.tag, 99);
    assert_eq!(ra.card_calls(1), 0, "the way back needs no card either");
    assert_eq!((peer_mappings(a), rings_made(a)), (2, 1));
    assert_eq!(peer_mappings(b), 2);
    // Process 2 was never talked to.
    assert!(c.connected_peers().is_empty() && rc.count() == 0);
    assert_eq!((a.backlog(2), b.backlog(2)), (0, 0));
    assert_eq!(a.connected_peers(), [1]);
    assert!(ra.events().is_empty() && rb.events().is_empty());
    job.assert_clean();
}

/// A receiver asleep in `poll` is woken by the first frame of a sender it
/// never mapped: the announcement comes before the frame, which wakes it.
#[test]
fn a_sleeping_receiver_gets_frames_from_a_sender_it_never_mapped() {
    for _ in 0..10 {
        let (job, sides) = lazy_job(2, Mode::Get);
        let [(a, ra), (b, _rb)] = &sides[..] else {
            unreachable!()
        };
        let (tx, rx) = mpsc::channel();
        let (a2, ra2) = (Arc::clone(a), Arc::clone(ra));
        let t = std::thread::spawn(move || {
            while ra2.count() < 3 {
                a2.poll(PollDir::InFirst, None).unwrap();
            }
            tx.send(()).unwrap();
        });
        wait_until("the poll to sleep", || {
            a.own.u32_at(OFF_SLEEPING).load(Ordering::SeqCst) == 1
        });
        for tag in 0..3 {
            send_by(b, 0, tag, tag, 8);
        }
        let woke = rx.recv_timeout(HANG);
        if woke.is_err() {
            a.wake();
        }
        t.join().unwrap();
        assert!(woke.is_ok(), "the poll slept through the frames");
        let tags: Vec<u32> = lock(&ra.got).iter().map(|g| g.header.tag).collect();
        assert_eq!(tags, [0, 1, 2]);
        drop(sides);
        job.assert_clean();
    }
}

/// The window in which another thread has taken the announcement list and
/// not yet added its rings (`connected_peers` at the end of a job, a
/// worker's `try_progress`): a cell published there, before the progress
/// thread said it sleeps, woke no one, so the progress thread must not go
/// to sleep then. It found a job's end hanging (a process waiting for a
/// `Bye` its progress thread slept over). The window is made by hand here:
/// this thread takes the list as `take_announcements` does and holds
/// `discovering` while another thread asks whether to sleep.
#[test]
fn a_ring_being_taken_by_another_thread_keeps_the_progress_thread_awake() {
    let (job, sides) = lazy_job(2, Mode::Get);
    let [(a, ra), (b, _rb)] = &sides[..] else {
        unreachable!()
    };
    // B's first frame to A: the ring is announced, then the cell published.
    send_by(b, 0, 0, 5, 8);
    let taking = lock(&a.discovering);
    let entry = a.own.u64_at(OFF_ANNOUNCED).swap(0, Ordering::SeqCst);
    assert_eq!(entry, announcement(1, 0));
    let asks = || std::thread::scope(|s| s.spawn(|| a.has_incoming()).join().unwrap());
    assert!(
        asks(),
        "the list taken, the ring not mapped yet: the progress thread would sleep"
    );
    assert_eq!(a.map_ring_from(1, 0), Ok(0));
    assert!(asks(), "the ring mapped, `discovering` still held");
    drop(taking);
    assert!(asks(), "the ring in `active` with its cell");
    poll_until(&[a], || ra.count() == 1);
    assert_eq!(lock(&ra.got)[0].header.tag, 5);
    drop(sides);
    job.assert_clean();
}

/// Two processes sending first to each other at once, two threads each:
/// each ends with one VC and one ring to the other, and every thread's
/// frames arrive in order.
#[test]
fn two_processes_sending_first_to_each_other_at_once_end_with_one_vc() {
    const EACH: u32 = 100;
    for _ in 0..10 {
        let (job, sides) = lazy_job(2, Mode::Get);
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let from = Arc::clone(&sides[t as usize % 2].0);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let to = 1 - from.me;
                    barrier.wait();
                    for i in 0..EACH {
                        send_by(&from, to, i, t << 16 | i, (i as usize * 37) % 200);
                    }
                })
            })
            .collect();
        let mods: Vec<&ShmModule> = sides.iter().map(|(m, _)| &**m).collect();
        progress_until(&mods, || {
            sides.iter().all(|(_, r)| r.count() == 2 * EACH as usize)
        });
        for t in threads {
            t.join().unwrap();
        }
        for (m, r) in &sides {
            let other = 1 - m.me;
            assert_eq!(m.connected_peers(), [other]);
            assert_eq!(rings_made(m), 1, "one ring to the other");
            assert_eq!(m.active.len(), 1, "one VC");
            assert_eq!(peer_mappings(m), 2, "the other's header and ring");
            // None if the other's ring was taken before this process's
            // first send; one per sending thread at most.
            let calls = r.card_calls(other);
            assert!(calls <= 2, "{calls} card look-ups");
            let mut next = [0u32; 4];
            for g in lock(&r.got).iter() {
                let (t, i) = ((g.header.tag >> 16) as usize, g.header.tag & 0xffff);
                assert_eq!(t % 2, other, "from the other process");
                assert_eq!(i, next[t], "thread {t}'s frames in order");
                next[t] += 1;
                assert!(g.body == pattern(g.header.tag, g.header.len as usize));
            }
            assert!(r.events().is_empty());
        }
        job.assert_clean();
    }
}

/// 64 processes, each sending only to the next: each maps the headers of
/// its two neighbours and the ring of one, whatever the job's size, and
/// every frame arrives in order.
#[test]
fn sixty_four_processes_talking_to_their_neighbours_map_a_few_segments_each() {
    const N: usize = 64;
    const EACH: u32 = 30;
    let (job, sides) = lazy_job(N, Mode::Get);
    for i in 0..EACH {
        for (m, _) in &sides {
            let len = (i as usize * 101) % (2 * CELL_DATA);
            send_by(m, (m.me + 1) % N, i, (m.me as u32) << 16 | i, len);
        }
    }
    let mods: Vec<&ShmModule> = sides.iter().map(|(m, _)| &**m).collect();
    progress_until(&mods, || {
        sides.iter().all(|(_, r)| r.count() == EACH as usize)
    });
    for (m, r) in &sides {
        let (prev, next) = ((m.me + N - 1) % N, (m.me + 1) % N);
        for (i, g) in lock(&r.got).iter().enumerate() {
            assert_eq!(
                (g.peer, g.header.tag),
                (prev, (prev as u32) << 16 | i as u32)
            );
            assert!(g.body == pattern(g.header.tag, g.header.len as usize));
        }
        assert_eq!(
            peer_mappings(m),
            3,
            "process {}: the neighbours' headers, the previous one's ring",
            m.me
        );
        assert_eq!(rings_made(m), 1);
        let mut both = vec![prev, next];
        both.sort_unstable();
        assert_eq!(m.connected_peers(), both);
        assert_eq!(r.card_calls(next), 1);
        assert_eq!(lock(&r.card_calls).len(), 1, "no other card asked for");
        assert!(r.events().is_empty());
    }
    drop(mods);
    job.assert_clean();
}

#[test]
fn a_card_that_cannot_be_had_is_an_error_naming_the_peer() {
    let (job, sides) = lazy_job(3, Mode::Get);
    let [(a, ra), ..] = &sides[..] else {
        unreachable!()
    };
    let card_of_2 = lock(&ra.cards).remove(&2).unwrap();
    let small = || header(FrameKind::Control, 1, 0);
    let refused = [
        a.istart_contig(2, small(), SendData::Bytes(vec![1]))
            .map(|_| ()),
        a.isend_contig(2, SendRequest::new(), small(), SendData::Bytes(vec![1])),
        a.send_noncontig(2, SendRequest::new(), small(), &[&[1]]),
        a.post_contig(2, small(), SendData::Bytes(vec![1]))
            .map(|_| ()),
    ];
    for r in refused {
        let e = r.unwrap_err();
        assert_eq!(e.peer, Some(2));
        assert_eq!(
            e.to_string(),
            "process 2: shm: no card to connect by: the bootstrap knows no such process"
        );
    }
    assert!(!a.copies_peer_memory(2));
    // A failure leaves nothing behind.
    assert!(a.connected_peers().is_empty());
    assert_eq!((a.backlog(2), rings_made(a), peer_mappings(a)), (0, 0, 0));
    // A card of another job's process is refused, naming the peer.
    let other = Job::new(3);
    let stranger = ShmModule::init(2, 3, other.tag, other.tag, MAX_PAYLOAD).unwrap();
    lock(&ra.cards).insert(2, stranger.business_card());
    let e = a
        .isend_contig(2, SendRequest::new(), small(), SendData::Bytes(vec![1]))
        .unwrap_err();
    assert_eq!(e.peer, Some(2));
    assert!(e.what.contains("expected that of process 2"), "{e}");
    drop(stranger);
    other.assert_clean();
    // Once the card is known, the send goes.
    lock(&ra.cards).insert(2, card_of_2);
    a.istart_contig(2, small(), SendData::Bytes(vec![7]))
        .unwrap();
    poll_until(&[&sides[2].0], || sides[2].1.count() == 1);
    assert_eq!(a.connected_peers(), [2]);
    job.assert_clean();
}

/// A receiver answers a large message's RTS (Get: DONE; Put: CTS) over a
/// ring it makes from the sender's header, with no card.
#[test]
fn a_large_message_from_a_sender_never_mapped_is_answered_without_a_card() {
    for mode in [Mode::Get, Mode::Put] {
        let (job, sides) = lazy_job(2, mode);
        let [(a, ra), (b, _rb)] = &sides[..] else {
            unreachable!()
        };
        // Process 0 knows no card for process 1.
        lock(&ra.cards).remove(&1);
        let bytes = post_message(b, 0, LMT_MIN + 3, 1);
        post_small(b, 0, 2);
        poll_until(&[a, b], || ra.count() == 2 && b.backlog(0) == 0);
        let got = lock(&ra.got);
        assert!(got[0].as_message && got[0].body == bytes, "{mode:?}");
        assert_eq!(got[1].header.tag, 2);
        assert_eq!(
            a.lmt_reads.load(Ordering::SeqCst) + b.lmt_writes.load(Ordering::SeqCst),
            1,
            "{mode:?}: in one copy"
        );
        assert_eq!(ra.card_calls(1), 0);
        assert_eq!(rings_made(a), 1, "the ring back");
        assert!(lent(b, 0) == 0);
        assert!(ra.events().is_empty());
        drop(got);
        job.assert_clean();
    }
}

/// `vc_init` (start-up's eager connection) on a VC made from the peer's
/// announcement makes the ring back; a second one is refused, as is
/// another card.
#[test]
fn vc_init_after_the_peer_announced_itself_connects_the_way_back() {
    let (job, sides) = lazy_job(2, Mode::Get);
    let [(a, ra), (b, rb)] = &sides[..] else {
        unreachable!()
    };
    send_by(b, 0, 0, 1, 8);
    assert_eq!(a.connected_peers(), [1], "made from the announcement");
    let card = b.business_card();
    let forged = card.replace(&format!(":{}:", std::process::id()), ":1:");
    let e = a.vc_init(1, &forged).unwrap_err();
    assert!(e.what.contains("is not the one VC 1 was made from"), "{e}");
    a.vc_init(1, &card).unwrap();
    assert_eq!(rings_made(a), 1);
    assert_eq!(
        a.vc_init(1, &card).unwrap_err().what,
        "shm: connected twice"
    );
    b.vc_init(0, &a.business_card()).unwrap_err();
    send_by(a, 1, 0, 2, 8);
    poll_until(&[a, b], || ra.count() == 1 && rb.count() == 1);
    assert_eq!(b.connected_peers(), [0]);
    assert_eq!((ra.card_calls(1), rb.card_calls(0)), (0, 1));
    job.assert_clean();
}

/// What another process writes into the announcement list is checked: an
/// entry naming no process of the job is the next poll's error; a ring
/// that is not there, or not for this process, fails the writer's VC.
#[test]
fn a_bad_announcement_is_reported() {
    let (job, sides) = lazy_job(3, Mode::Get);
    let [(a, ra), (b, _rb), (c, rc)] = &sides[..] else {
        unreachable!()
    };
    let list = a.own.u64_at(OFF_ANNOUNCED);
    list.store(announcement(7, 0), Ordering::SeqCst);
    let e = a
        .poll(PollDir::InFirst, Some(Duration::from_millis(1)))
        .unwrap_err();
    assert_eq!(e.peer, None);
    assert!(e.what.contains("malformed announcement"), "{e}");
    assert!(a.poll(PollDir::InFirst, Some(Duration::ZERO)).is_ok());
    list.store(announcement(1, 2), Ordering::SeqCst);
    a.try_progress();
    assert!(
        ra.events()[0]
            .starts_with("failed 1: malformed data from process 1: ring 2 announced, but segment"),
        "{:?}",
        ra.events()
    );
    // A ring of process 1's for process 2, announced to process 0.
    send_by(b, 2, 0, 1, 8);
    list.store(announcement(1, 0), Ordering::SeqCst);
    a.try_progress();
    assert!(
        ra.events()[1]
            .ends_with("is from process 1 to process 2 (announcements behind its ring's are lost)"),
        "{:?}",
        ra.events()
    );
    // Process 2 got its frame all the same.
    poll_until(&[c], || rc.count() == 1);
    job.assert_clean();
}

/// The end of a job: process 1 sent to process 0 first (it opened 0's
/// segment then); 0's first frame to 1 (its `Bye`) makes a ring in 0's
/// segment, and 0 may end (its name removed) before 1 takes the
/// announcement. The ring is still mapped, from the segment 1 holds open.
#[test]
fn a_ring_announced_by_a_peer_whose_name_is_gone_is_still_taken() {
    let (job, sides) = lazy_job(2, Mode::Get);
    let [(a, ra), (b, rb)] = &sides[..] else {
        unreachable!()
    };
    send_by(b, 0, 0, 1, 8);
    poll_until(&[a, b], || ra.count() == 1);
    send_by(a, 1, 0, 2, 8);
    // Process 0 ends: its segment's name goes.
    a.finalize();
    assert!(job.leftovers().iter().all(|n| !n.ends_with("-0")));
    poll_until(&[b], || rb.count() == 1);
    assert_eq!(lock(&rb.got)[0].header.tag, 2);
    assert!(rb.events().is_empty(), "{:?}", rb.events());
}

/// An abort: process 0 writes its last frame (its `Abort`) to process 1,
/// which has never opened 0's segment, then ends. Its `finalize` keeps the
/// segment's name until 1 has mapped the ring (it would otherwise find no
/// name to open, and report a lost process instead of the frame), and
/// removes it once 1 has.
#[test]
fn finalize_keeps_the_name_until_the_reader_has_taken_its_ring() {
    let (job, sides) = lazy_job(2, Mode::Get);
    let [(a, _), (b, rb)] = &sides[..] else {
        unreachable!()
    };
    send_by(a, 1, 0, 7, 8);
    let ending = {
        let a = Arc::clone(a);
        std::thread::spawn(move || a.finalize())
    };
    // Process 0 is ending; process 1 looks only a while later.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        job.leftovers()
            .iter()
            .any(|n| *n == segment_name(job.tag, 0)[1..]),
        "process 0's name went before process 1 took its ring"
    );
    poll_until(&[b], || rb.count() == 1);
    assert_eq!(lock(&rb.got)[0].header.tag, 7);
    assert!(rb.events().is_empty(), "{:?}", rb.events());
    ending.join().unwrap();
    assert!(job.leftovers().iter().all(|n| !n.ends_with("-0")));
    job.assert_clean();
}

/// Two processes ending together (one aborts, the other hears of it):
/// neither waits for the other to take a ring it will not take.
#[test]
fn finalize_does_not_wait_for_a_reader_that_is_ending_too() {
    let (job, sides) = lazy_job(2, Mode::Get);
    let [(a, _), (b, _)] = &sides[..] else {
        unreachable!()
    };
    send_by(a, 1, 0, 7, 8);
    // Process 1 ends without taking process 0's ring.
    b.finalize();
    let (done, waited) = mpsc::channel();
    {
        let a = Arc::clone(a);
        // Were process 1's `ending` not heeded, this would wait an hour.
        std::thread::spawn(move || {
            a.wait_for_readers(Duration::from_secs(3600));
            let _ = done.send(());
        });
    }
    waited
        .recv_timeout(HANG)
        .expect("process 0 waited for a reader that is ending");
    job.assert_clean();
}

#[test]
fn a_peer_gone_without_ending_fails_its_vc_once_and_one_that_ended_does_not() {
    let (_job, (a, ra), (b, rb)) = pair();
    // Both in the same process here: the pid in the peer's header is its
    // own (same start time), and the check finds it alive.
    assert!(a.vc(1).unwrap().watched && b.vc(0).unwrap().watched);
    a.check_peers();
    assert!(ra.events().is_empty(), "{:?}", ra.events());
    // Told the peer's pid is gone: its VC fails, naming the pid, once.
    let pid = std::process::id();
    a.check_peers_with(|_| false);
    a.check_peers_with(|_| false);
    assert_eq!(
        ra.events(),
        [format!(
            "failed 1: its process (pid {pid}) is gone without ending: killed, or it crashed"
        )]
    );
    // A peer that ended (its `ending` set, as `finalize` does first) is
    // gone as it should be.
    a.own.u32_at(OFF_ENDING).store(1, Ordering::Release);
    b.check_peers_with(|_| false);
    assert!(rb.events().is_empty(), "{:?}", rb.events());
    assert_eq!(b.peer_check_period(), Some(PEER_CHECK));
}

/// `ckpt_shutdown` ends a module as `finalize` does (its names removed),
/// so that a restarted process makes its module anew (`net_module_init`)
/// under the same names, connects again, and frames flow both ways.
#[test]
fn a_module_made_anew_after_ckpt_shutdown_connects_again() {
    let job = Job::new(2);
    for round in 0..2u32 {
        let (a, ra) = job.module(0);
        let (b, rb) = job.module(1);
        connect(&[&a, &b]);
        post_small(&a, 1, 10 + round);
        post_small(&b, 0, 20 + round);
        a.flush_all();
        b.flush_all();
        poll_until(&[&a, &b], || ra.count() == 1 && rb.count() == 1);
        assert_eq!(lock(&ra.got)[0].header.tag, 20 + round);
        assert_eq!(lock(&rb.got)[0].header.tag, 10 + round);
        a.ckpt_shutdown();
        b.ckpt_shutdown();
    }
    job.assert_clean();
}
