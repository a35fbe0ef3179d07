//! The MPI network module alone, between two ranks (feature `mpi`): every
//! send call with frames of 0 B to 4 MiB both ways, contents checked;
//! large copying sends lent to MPI from the caller's memory, both ways at
//! once; a watched rank on this host found gone; a
//! request whose continuation adds data, with a frame sent after it; a VC
//! terminated, then used again (the spec's "may be used for communication
//! again later").
//!
//! Run by `cargo test -p converse-net --features mpi --test mpi_module`:
//! started by cargo, the binary runs itself under `mpiexec -n 2`; started
//! by `mpiexec` (`PMI_RANK` set), it is a rank. Without `mpiexec` on the
//! PATH it says `skipped` (a failure where `CONVERSE_TEST_MPI` is set).
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use converse_net::frame::{FrameHeader, FrameKind};
use converse_net::mpi::{self, LocalPeer, MpiModule};
use converse_net::netmod::{DataAvail, NetModule, PollDir, SendData, SendRequest, Upcalls};

const MAX: usize = 1 << 30;
const SIZES: [usize; 9] = [
    0,
    1,
    (16 << 10) - 16,
    (16 << 10) - 15,
    (64 << 10) + 3,
    1 << 20,
    (1 << 20) + 17,
    4 << 20,
    9,
];

/// The tag of a goodbye: as in the runtime's exit protocol, each side
/// says it, and terminates the VC once it has the other's; a close that
/// comes after the peer's goodbye is the end, not a fault.
const BYE: u32 = 59;

#[derive(Default)]
struct Record {
    frames: Mutex<Vec<(FrameHeader, Vec<u8>)>>,
    byes: AtomicUsize,
    terminated: AtomicUsize,
    failed: Mutex<Vec<String>>,
}

impl Upcalls for Record {
    fn frame(&self, _peer: usize, header: FrameHeader, body: Vec<u8>) {
        if header.tag == BYE {
            self.byes.fetch_add(1, Ordering::SeqCst);
        } else {
            self.frames.lock().unwrap().push((header, body));
        }
    }
    fn vc_terminated(&self, _peer: usize) {
        self.terminated.fetch_add(1, Ordering::SeqCst);
    }
    fn vc_failed(&self, peer: usize, why: String) {
        let after_bye = self.byes.load(Ordering::SeqCst) > self.terminated.load(Ordering::SeqCst);
        if !(after_bye && why == "connection closed by the peer") {
            self.failed.lock().unwrap().push(format!("{peer}: {why}"));
        }
    }
}

/// Says goodbye to `peer`, waits for its goodbye, terminates the VC and
/// waits until it is (the `round`th time).
fn bye_and_terminate(m: &MpiModule, rec: &Record, me: usize, peer: usize, round: usize) {
    m.post_contig(peer, header(0, BYE, me), SendData::Bytes(Vec::new()))
        .unwrap();
    poll_until(m, rec, "the peer's goodbye", || {
        rec.byes.load(Ordering::SeqCst) == round
    });
    m.vc_terminate(peer);
    assert!(
        m.post_contig(peer, header(1, 60, me), SendData::Bytes(vec![0]))
            .is_err(),
        "a send on a terminated VC is refused"
    );
    poll_until(m, rec, "the VC terminates", || {
        rec.terminated.load(Ordering::SeqCst) == round
    });
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(7)) as u8
        })
        .collect()
}

fn header(len: usize, tag: u32, src: usize) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Control,
        flags: 0,
        len: len as u32,
        src: src as u32,
        tag,
    }
}

/// Polls until `done`, failing after 30 s with `what`.
fn poll_until(m: &MpiModule, rec: &Record, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            rec.failed.lock().unwrap().is_empty(),
            "{what}: {:?}",
            rec.failed.lock().unwrap()
        );
        assert!(Instant::now() < deadline, "{what}: timed out");
        m.poll(PollDir::InFirst, Some(Duration::from_millis(1)))
            .unwrap();
    }
}

/// Takes the frames received so far.
fn take(rec: &Record) -> Vec<(FrameHeader, Vec<u8>)> {
    std::mem::take(&mut *rec.frames.lock().unwrap())
}

/// The start time of process `pid` (field 22 of its `/proc/PID/stat`).
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_ascii_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap()
}

/// Lost peers: a watched rank on this host whose process dies fails its
/// VC once, naming the pid (a child stands for the peer's process here);
/// a pid whose start time is another process's is not watched.
fn lost_peers(m: &MpiModule, rec: &Record, peer: usize) {
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    let start = start_time(pid);
    let stranger = MpiModule::new(1 - peer, 2, MAX);
    stranger.watch_local_peers(&[LocalPeer {
        rank: peer,
        pid,
        start: start + 1,
    }]);
    assert_eq!(
        stranger.peer_check_period(),
        None,
        "a pid that is not the peer's"
    );
    drop(stranger);
    m.watch_local_peers(&[LocalPeer {
        rank: peer,
        pid,
        start,
    }]);
    assert_eq!(m.peer_check_period(), Some(mpi::PEER_CHECK));
    m.check_peers();
    assert!(rec.failed.lock().unwrap().is_empty(), "alive");
    child.kill().unwrap();
    child.wait().unwrap();
    m.check_peers();
    m.check_peers();
    let failed = std::mem::take(&mut *rec.failed.lock().unwrap());
    assert_eq!(
        failed,
        [format!(
            "{peer}: its process (pid {pid}) is gone without ending: killed, or it crashed"
        )],
        "once, naming the pid"
    );
}

fn rank_main(rank: usize) {
    let (me, size) = mpi::init().expect("MPI initializes");
    assert_eq!((me, size), (rank, 2));
    let peer = 1 - me;
    let rec = Arc::new(Record::default());
    let m = MpiModule::new(me, 2, MAX);
    m.set_upcalls(rec.clone());
    assert_eq!(m.business_card(), format!("mpi:{me}"));
    assert!(m.vc_init(peer, "mpi:7").is_err(), "a card for another rank");
    m.vc_init(peer, &format!("mpi:{peer}")).unwrap();
    lost_peers(&m, &rec, peer);

    // Every size through every send call, both ways at once.
    let mut reqs = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let body = pattern(len, i as u32 + 100 * me as u32);
        let h = header(len, i as u32, me);
        match i % 4 {
            0 => {
                let r = SendRequest::new();
                m.isend_contig(peer, r.clone(), h, SendData::Bytes(body))
                    .unwrap();
                reqs.push(r);
            }
            1 => reqs.extend(m.istart_contig(peer, h, SendData::Bytes(body)).unwrap()),
            2 => {
                let r = SendRequest::new();
                let cut = len / 3;
                m.send_noncontig(peer, r.clone(), h, &[&body[..cut], &body[cut..]])
                    .unwrap();
                reqs.push(r);
            }
            _ => {
                m.post_contig(peer, h, SendData::Bytes(body)).unwrap();
            }
        }
    }
    poll_until(&m, &rec, "every size arrives", || {
        rec.frames.lock().unwrap().len() == SIZES.len()
    });
    for (i, (h, body)) in take(&rec).into_iter().enumerate() {
        assert_eq!(h.tag, i as u32, "frames in order");
        assert_eq!(h.src as usize, peer);
        assert!(
            body == pattern(SIZES[i], i as u32 + 100 * peer as u32),
            "frame {i} of {} bytes differs",
            SIZES[i]
        );
    }
    poll_until(&m, &rec, "the sends complete", || {
        reqs.iter().all(SendRequest::is_complete) && !m.has_queued()
    });
    assert_eq!(m.backlog(peer), 0);

    // Copying sends of large messages lent to MPI from the caller's memory
    // (a short first piece, a last one of at least `BORROWED_MIN`): both
    // ranks at once, so each waits in its send for the other, which takes
    // it while waiting in its own. The call returns with the request
    // complete, and the caller's bytes written over afterwards change
    // nothing that arrives.
    let lent = [mpi::BORROWED_MIN, 4 << 20];
    for (k, &len) in lent.iter().enumerate() {
        let mut body = pattern(len + 32, 200 + k as u32 + 100 * me as u32);
        let r = SendRequest::new();
        m.send_noncontig(
            peer,
            r.clone(),
            header(len + 32, 80 + k as u32, me),
            &[&body[..32], &body[32..]],
        )
        .unwrap();
        assert!(r.is_complete(), "a lent send returns once MPI is done");
        body.fill(0xEE);
    }
    poll_until(&m, &rec, "the lent sends arrive", || {
        rec.frames.lock().unwrap().len() == lent.len()
    });
    for (k, (h, body)) in take(&rec).into_iter().enumerate() {
        assert_eq!(h.tag, 80 + k as u32, "lent frames in order");
        assert!(
            body == pattern(lent[k] + 32, 200 + k as u32 + 100 * peer as u32),
            "lent frame {k} differs"
        );
    }
    assert_eq!(m.backlog(peer), 0);

    // A request whose continuation adds two more pieces of the frame; a
    // frame sent after it comes after all of it.
    const PIECE: usize = 40_000;
    let whole = pattern(3 * PIECE, 77);
    if me == 0 {
        let pieces = Arc::new(Mutex::new(vec![
            whole[2 * PIECE..].to_vec(),
            whole[PIECE..2 * PIECE].to_vec(),
        ]));
        let req = SendRequest::with_continuation(Some(Box::new(move || {
            match pieces.lock().unwrap().pop() {
                Some(p) => DataAvail::More(SendData::Bytes(p)),
                None => DataAvail::Complete,
            }
        })));
        m.isend_contig(
            1,
            req.clone(),
            header(3 * PIECE, 50, 0),
            SendData::Bytes(whole[..PIECE].to_vec()),
        )
        .unwrap();
        m.post_contig(1, header(3, 51, 0), SendData::Bytes(vec![1, 2, 3]))
            .unwrap();
        poll_until(&m, &rec, "the continued request completes", || {
            req.is_complete()
        });
        poll_until(&m, &rec, "the answer", || {
            rec.frames.lock().unwrap().len() == 1
        });
        assert_eq!(take(&rec)[0].0.tag, 52);
    } else {
        poll_until(&m, &rec, "the continued frame and the one after", || {
            rec.frames.lock().unwrap().len() == 2
        });
        let got = take(&rec);
        assert_eq!((got[0].0.tag, got[1].0.tag), (50, 51));
        assert!(got[0].1 == whole, "the continued frame's bytes");
        assert_eq!(got[1].1, [1, 2, 3]);
        m.post_contig(0, header(0, 52, 1), SendData::Bytes(Vec::new()))
            .unwrap();
    }

    // Terminated, then used again.
    bye_and_terminate(&m, &rec, me, peer, 1);
    m.vc_init(peer, &format!("mpi:{peer}")).unwrap();
    m.post_contig(
        peer,
        header(5, 70 + me as u32, me),
        SendData::Bytes(pattern(5, 70)),
    )
    .unwrap();
    poll_until(&m, &rec, "a frame on the VC used again", || {
        rec.frames.lock().unwrap().len() == 1
    });
    let got = take(&rec);
    assert_eq!(got[0].0.tag, 70 + peer as u32);
    assert_eq!(got[0].1, pattern(5, 70));
    // Both sides end the VC again before MPI ends.
    bye_and_terminate(&m, &rec, me, peer, 2);
    m.finalize();
    drop(m);
    mpi::finalize();
    println!("rank {me}: ok");
}

fn main() {
    if let Ok(rank) = std::env::var("PMI_RANK") {
        rank_main(rank.parse().expect("a rank"));
        return;
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("mpiexec").is_file()));
    if !found {
        assert!(
            std::env::var_os("CONVERSE_TEST_MPI").is_none(),
            "CONVERSE_TEST_MPI is set but there is no mpiexec on PATH"
        );
        println!("mpi_module: skipped (no mpiexec on PATH)");
        return;
    }
    let me = std::env::current_exe().unwrap();
    let mut child = Command::new("mpiexec")
        .args(["-n", "2"])
        .arg(&me)
        .spawn()
        .expect("mpiexec starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the two ranks did not end within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "a rank failed: {status}");
    println!("mpi_module: both ranks ok");
}
