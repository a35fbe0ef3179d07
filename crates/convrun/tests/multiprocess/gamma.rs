//! GAMMA across processes: groups whose nodes are the processes (and
//! threads) of a `convrun` job, over shm, tcp and both; started with
//! `gamma::run`, and with `gamma::init` (one node per process, the
//! program's own thread). The same programs run in one process in
//! `converse-gamma/tests/gamma.rs`.
use std::cell::Cell;
use std::rc::Rc;

use converse::cmi_printf;
use converse_gamma::{self as gamma, BROADCAST, Buffer, Dest, DestNode, GO_AHEAD, GO_BACK};

use crate::Case;
use crate::scenarios::{Jobs, output, start_job};

fn to(node: u16, port: u16) -> Option<Dest> {
    Some(Dest {
        node: DestNode::Node(node),
        par_pid: gamma::my_par_pid().expect("a member"),
        port,
    })
}

/// Ping-pong between nodes 0 and the last, a gather into node 0's
/// `GO_AHEAD` buffer from every node, flow-controlled sends from every
/// node into one slot of node 0, a broadcast and barriers. Panics (so the
/// job fails) on any wrong byte.
fn exercise() {
    let me = gamma::my_node().unwrap();
    let n = gamma::how_many_nodes().unwrap();
    let last = n - 1;

    // Ping-pong on port 1 (active: the handler checks and signals 2).
    let inbox = Buffer::new(8);
    let count = Rc::new(Cell::new(0u64));
    let (b, c) = (inbox.clone(), Rc::clone(&count));
    let on_arrival = Rc::new(move || {
        // Node 0 sends 1, 3, 5...; the last node answers 2, 4, 6...
        let x = u64::from_le_bytes(b.borrow()[..].try_into().unwrap());
        let first = if gamma::my_node().unwrap() == 0 { 2 } else { 1 };
        assert_eq!(x, 2 * c.get() + first, "ping-pong value");
        c.set(c.get() + 1);
        gamma::signal(2).unwrap();
    });
    if me == 0 || me == last {
        let peer = if me == 0 { last } else { 0 };
        gamma::set_active_port(
            1,
            to(peer, 1),
            Some(on_arrival),
            None,
            1,
            GO_BACK,
            Some(inbox.clone()),
            8,
        )
        .unwrap();
    }
    // Gather on port 3, flow control on port 4, broadcast on port 5.
    let total: usize = (1..n as usize).map(|k| k + 1).sum();
    let gather = Buffer::new(total.max(1));
    let slot = Buffer::new(8);
    if me == 0 {
        gamma::set_passive_port(3, None, 3, GO_AHEAD, Some(gather.clone()), total).unwrap();
        gamma::set_passive_port(4, None, 4, GO_BACK, Some(slot.clone()), 8).unwrap();
    } else {
        gamma::set_passive_port(3, to(0, 3), 0, GO_BACK, None, 0).unwrap();
        gamma::set_passive_port(4, to(0, 4), 0, GO_BACK, None, 0).unwrap();
    }
    let bcast = Buffer::new(n as usize);
    let all = Dest {
        node: BROADCAST,
        par_pid: gamma::my_par_pid().unwrap(),
        port: 5,
    };
    gamma::set_passive_port(5, Some(all), 5, GO_AHEAD, Some(bcast.clone()), n as usize).unwrap();
    gamma::sync().unwrap();

    let rounds = 200u64;
    if n > 1 {
        for i in 0..rounds {
            assert!(me != 0 || count.get() == i);
            if me == 0 {
                gamma::send(1, &(2 * i + 1).to_le_bytes()).unwrap();
                assert_eq!(gamma::wait(2, 1), Ok(0));
            } else if me == last {
                assert_eq!(gamma::wait(2, 1), Ok(0));
                gamma::send(1, &(2 * i + 2).to_le_bytes()).unwrap();
            }
        }
    }

    let per_sender = 40u32;
    if me == 0 {
        assert_eq!(gamma::wait(3, u64::from(n - 1)), Ok(0));
        let mut got = gather.to_vec();
        got.sort();
        let want: Vec<u8> = (1..n).flat_map(|k| vec![k as u8; k as usize + 1]).collect();
        assert_eq!(got, want, "gathered bytes");
        let mut next = vec![0u32; n as usize];
        for _ in 0..per_sender * u32::from(n - 1) {
            assert_eq!(gamma::wait(4, 1), Ok(0));
            assert_eq!(
                gamma::test(4),
                Ok(0),
                "a message stored into an unreleased buffer"
            );
            let (from, seq) = {
                let b = slot.borrow();
                (
                    u32::from_le_bytes(b[..4].try_into().unwrap()),
                    u32::from_le_bytes(b[4..].try_into().unwrap()),
                )
            };
            assert_eq!(
                seq, next[from as usize],
                "flow-controlled order from node {from}"
            );
            next[from as usize] += 1;
            gamma::post_recv(4, &slot, 8).unwrap();
        }
    } else {
        gamma::send(3, &vec![me as u8; me as usize + 1]).unwrap();
        for seq in 0..per_sender {
            let mut m = u32::from(me).to_le_bytes().to_vec();
            m.extend_from_slice(&seq.to_le_bytes());
            gamma::send_flowctl(4, &m).unwrap();
        }
    }

    // Large messages between node 0 and the last, both sending at once:
    // offered for the receiver to read when the two are processes apart
    // (`converse_gamma::OFFER_MIN`), plain messages otherwise.
    if n > 1 && (me == 0 || me == last) {
        let peer = if me == 0 { last } else { 0 };
        let len = (2 << 20) + 3;
        let big = Buffer::new(len);
        gamma::set_passive_port(6, to(peer, 6), 6, GO_BACK, Some(big.clone()), len).unwrap();
        let pattern = |from: u16, round: usize| -> Vec<u8> {
            (0..len)
                .map(|i| (i * 31 + round * 7 + from as usize) as u8)
                .collect()
        };
        // Both ports set up before either sends.
        let ready = Buffer::new(1);
        gamma::set_passive_port(7, to(peer, 7), 7, GO_BACK, Some(ready), 1).unwrap();
        gamma::send(7, b"r").unwrap();
        assert_eq!(gamma::wait(7, 1), Ok(0));
        for round in 0..3 {
            gamma::send(6, &pattern(me, round)).unwrap();
            assert_eq!(gamma::wait(6, 1), Ok(0));
            assert!(
                *big.borrow() == pattern(peer, round),
                "large message {round} from node {peer}"
            );
        }
    }

    gamma::send(5, &[me as u8]).unwrap();
    assert_eq!(gamma::wait(5, u64::from(n - 1)), Ok(0));
    let mut got = bcast.borrow()[..n as usize - 1].to_vec();
    got.sort();
    let others: Vec<u8> = (0..n).filter(|&k| k != me).map(|k| k as u8).collect();
    assert_eq!(got, others, "broadcast");
    for _ in 0..5 {
        gamma::sync().unwrap();
    }
}

/// `gamma::run` under the launcher: the group is the job.
fn gamma_run(args: &[String]) -> i32 {
    let mut argv = vec!["gamma_run".to_string()];
    argv.extend_from_slice(args);
    gamma::run(0, argv, || {
        exercise();
        if gamma::my_node().unwrap() == 0 {
            cmi_printf!("ok gamma_run\n");
        }
    })
    .expect("the group starts")
}

/// `gamma::init`: the program's thread is the node.
fn gamma_init(args: &[String]) -> i32 {
    let mut argv = vec!["gamma_init".to_string()];
    argv.extend_from_slice(args);
    gamma::init(0, argv).expect("gamma_init");
    exercise();
    let me = gamma::my_node().unwrap();
    let code = gamma::exit().expect("gamma_exit");
    if me == 0 {
        println!("ok gamma_init");
    }
    code
}

/// Node 1 leaves at once; node 0 then waits for a message that can never
/// come: an error naming the wait, not a hang.
fn gamma_deadlock(args: &[String]) -> i32 {
    let mut argv = vec!["gamma_deadlock".to_string()];
    argv.extend_from_slice(args);
    gamma::run(0, argv, || {
        if gamma::my_node().unwrap() != 0 {
            return;
        }
        gamma::set_passive_port(1, None, 1, GO_BACK, None, 0).unwrap();
        match gamma::wait(1, 1) {
            Err(e) => converse::abort(&e.to_string()),
            Ok(_) => panic!("a message from nowhere"),
        }
    })
    .expect("the group starts")
}

/// Node 0 offers a large message to node 1, which sleeps without polling
/// and then leaves: the send fails, naming node 1.
fn gamma_offer_left(args: &[String]) -> i32 {
    let mut argv = vec!["gamma_offer_left".to_string()];
    argv.extend_from_slice(args);
    gamma::run(0, argv, || {
        if gamma::my_node().unwrap() != 0 {
            std::thread::sleep(std::time::Duration::from_millis(300));
            return;
        }
        gamma::set_passive_port(1, to(1, 1), 0, GO_BACK, None, 0).unwrap();
        match gamma::send(1, &vec![5u8; 3 << 20]) {
            Err(e) => cmi_printf!("send failed: {e}\n"),
            Ok(()) => cmi_printf!("send succeeded\n"),
        }
    })
    .expect("the group starts")
}

/// Node 0 of this group writes its parallel pid to `dir/g<g>.pid`; every
/// node waits for the other group's.
fn meet(dir: &str, g: usize) -> u8 {
    let dir = std::path::Path::new(dir);
    if gamma::my_node().unwrap() == 0 {
        let tmp = dir.join(format!("g{g}.tmp"));
        std::fs::write(&tmp, gamma::my_par_pid().unwrap().to_string()).unwrap();
        std::fs::rename(&tmp, dir.join(format!("g{g}.pid"))).unwrap();
    }
    let theirs = dir.join(format!("g{}.pid", 1 - g));
    loop {
        if let Ok(t) = std::fs::read_to_string(&theirs) {
            return t.trim().parse().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// One of two groups started apart (`g` 0 or 1, by two `convrun`s):
/// group 0's node 1 sends flow-controlled messages to group 1's node 0;
/// group 1's node 1 broadcasts to every node of group 0.
fn gamma_pair(args: &[String]) -> i32 {
    let (dir, g): (String, usize) = (args[0].clone(), args[1].parse().unwrap());
    let argv = vec!["gamma_pair".to_string()];
    gamma::run(0, argv, move || {
        let other = meet(&dir, g);
        let me = gamma::my_node().unwrap();
        let inbox = Buffer::new(4);
        let per_sender = 30u32;
        if g == 0 {
            gamma::set_passive_port(4, None, 4, GO_BACK, Some(inbox.clone()), 4).unwrap();
            if me == 1 {
                let to_b = Dest {
                    node: DestNode::Node(0),
                    par_pid: other,
                    port: 3,
                };
                gamma::set_passive_port(3, Some(to_b), 0, GO_BACK, None, 0).unwrap();
                for seq in 0..per_sender {
                    gamma::send_flowctl(3, &seq.to_le_bytes()).unwrap();
                }
            }
            assert_eq!(gamma::wait(4, 1), Ok(0));
            assert_eq!(inbox.to_vec(), b"from", "the other group's broadcast");
        } else if me == 0 {
            gamma::set_passive_port(3, None, 3, GO_BACK, Some(inbox.clone()), 4).unwrap();
            for seq in 0..per_sender {
                assert_eq!(gamma::wait(3, 1), Ok(0));
                if seq % 5 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    assert_eq!(gamma::test(3), Ok(0), "overwritten before released");
                }
                assert_eq!(inbox.to_vec(), seq.to_le_bytes(), "order");
                gamma::post_recv(3, &inbox, 4).unwrap();
            }
        } else {
            let to_a = Dest {
                node: BROADCAST,
                par_pid: other,
                port: 4,
            };
            gamma::set_passive_port(5, Some(to_a), 0, GO_BACK, None, 0).unwrap();
            gamma::send(5, b"from").unwrap();
        }
        gamma::sync().unwrap();
        if me == 0 {
            cmi_printf!("ok gamma_pair {g}\n");
        }
    })
    .expect("the group starts")
}

/// A group whose node 0 publishes its parallel pid and waits; the driver
/// writes a malformed frame to its socket.
fn gamma_forged(args: &[String]) -> i32 {
    let dir = args[0].clone();
    gamma::run(0, vec!["gamma_forged".to_string()], move || {
        if gamma::my_node().unwrap() == 0 {
            let path = std::path::Path::new(&dir);
            std::fs::write(path.join("g.tmp"), gamma::my_par_pid().unwrap().to_string()).unwrap();
            std::fs::rename(path.join("g.tmp"), path.join("g.pid")).unwrap();
            gamma::set_passive_port(1, None, 1, GO_BACK, None, 0).unwrap();
            let _ = gamma::wait(1, 1);
        }
        let _ = gamma::sync();
    })
    .expect("the group starts")
}

/// `gamma_init(N)` in a process started by hand: it replicates itself
/// through convrun; every replica runs this again and joins.
fn gamma_init_plain(args: &[String]) -> i32 {
    let num_nodes: i32 = args[0].parse().unwrap();
    gamma::init(num_nodes, std::env::args()).expect("gamma_init");
    exercise();
    let (me, n) = (gamma::my_node().unwrap(), gamma::how_many_nodes().unwrap());
    let code = gamma::exit().expect("gamma_exit");
    if me == 0 {
        println!("ok gamma_init_plain {n}");
    }
    code
}

pub fn child(name: &str, args: &[String]) -> Option<i32> {
    Some(match name {
        "gamma_init_plain" => gamma_init_plain(args),
        "gamma_pair" => gamma_pair(args),
        "gamma_forged" => gamma_forged(args),
        "gamma_run" => gamma_run(args),
        "gamma_init" => gamma_init(args),
        "gamma_deadlock" => gamma_deadlock(args),
        "gamma_offer_left" => gamma_offer_left(args),
        _ => return None,
    })
}

fn gamma_run_case() {
    Jobs::default().ok("gamma_run", &[]).check();
}

fn gamma_init_case() {
    for netmod in ["shm", "tcp"] {
        let f = start_job(netmod, 3, 1, "gamma_init", &[]);
        assert!(
            f.code == Some(0) && f.stdout.lines().any(|l| l == "ok gamma_init"),
            "gamma_init over {netmod}\n{}",
            output(&f)
        );
    }
}

fn gamma_deadlock_case() {
    let f = start_job("shm", 2, 1, "gamma_deadlock", &[]);
    assert!(
        f.code != Some(0)
            && f.stderr.contains("gamma_wait(1, 1) has 0 of 1")
            && f.stderr.contains("every other node has left the group"),
        "expected an error naming the wait\n{}",
        output(&f)
    );
}

fn gamma_offer_left_case() {
    for netmod in ["shm", "tcp"] {
        let f = start_job(netmod, 2, 1, "gamma_offer_left", &[]);
        assert!(
            f.code == Some(0)
                && f.stdout.contains("send failed:")
                && f.stdout.contains(
                    "gamma: node 0: node 1 left the group before taking the message offered to it"
                ),
            "expected the send to fail naming node 1 over {netmod}\n{}",
            output(&f)
        );
    }
}

/// A fresh directory for two jobs to meet in.
fn meeting_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two `convrun` jobs of two processes each, started apart, over shm and
/// tcp: flow-controlled messages one way, a broadcast the other.
fn gamma_pair_case() {
    for netmod in ["shm", "tcp"] {
        let dir = meeting_dir("gamma-pair");
        let d = dir.display().to_string();
        let jobs: Vec<_> = ["0", "1"]
            .into_iter()
            .map(|g| {
                let d = d.clone();
                std::thread::spawn(move || start_job(netmod, 2, 1, "gamma_pair", &[&d, g]))
            })
            .collect();
        for (g, j) in jobs.into_iter().enumerate() {
            let f = j.join().unwrap();
            assert!(
                f.code == Some(0) && f.stdout.lines().any(|l| l == format!("ok gamma_pair {g}")),
                "group {g} over {netmod}\n{}",
                output(&f)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Bytes from another process on a node's socket are not trusted: a frame
/// of an unknown kind ends the job, naming the node and the cause.
fn gamma_forged_case() {
    let dir = meeting_dir("gamma-forged");
    let d = dir.display().to_string();
    let job = std::thread::spawn(move || start_job("shm", 2, 1, "gamma_forged", &[&d]));
    let pid_file = dir.join("g.pid");
    let pid: u8 = loop {
        if let Ok(t) = std::fs::read_to_string(&pid_file) {
            break t.trim().parse().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let uid = rustix::process::getuid().as_raw();
    let sock = std::env::temp_dir().join(format!("converse-gamma-{uid}/g{pid}-n0.sock"));
    let mut conn = loop {
        match std::os::unix::net::UnixStream::connect(&sock) {
            Ok(c) => break c,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    };
    use std::io::Write;
    conn.write_all(&[3, 0, 0, 0, 0xee, 9, 9]).unwrap();
    let f = job.join().unwrap();
    assert!(
        f.code != Some(0)
            && f.stderr.contains("gamma node 0 of group")
            && f.stderr
                .contains("a malformed frame from another group: unknown kind 238"),
        "expected an abort naming the frame\n{}",
        output(&f)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program started by hand calls `gamma_init(3)`: three nodes; with a
/// host file of two hosts, `gamma_init(5)` and `gamma_init(0)` make two.
fn gamma_init_plain_case() {
    let dir = meeting_dir("gamma-conf");
    let conf = dir.join("gamma.conf");
    std::fs::write(&conf, "group main\nhost localhost\nhost 127.0.0.1\n").unwrap();
    for (asked, conf, nodes) in [("3", None, 3), ("5", Some(&conf), 2), ("0", Some(&conf), 2)] {
        let f = crate::common::launch_with(
            &crate::common::me(),
            &["gamma_init_plain", asked],
            std::time::Duration::from_secs(60),
            |cmd| {
                cmd.env("CONVERSE_TEST_CHILD", "1")
                    .env("CONVERSE_CONVRUN", crate::common::CONVRUN)
                    .env_remove("CONVERSE_GAMMA_CONF");
                if let Some(c) = conf {
                    cmd.env("CONVERSE_GAMMA_CONF", c);
                }
            },
        );
        assert!(
            f.code == Some(0)
                && f.stdout
                    .lines()
                    .any(|l| l == format!("ok gamma_init_plain {nodes}")),
            "gamma_init({asked}) by hand, host file {conf:?}\n{}",
            output(&f)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

pub fn cases() -> Vec<Case> {
    vec![
        ("gamma_init_plain", gamma_init_plain_case),
        ("gamma_pair", gamma_pair_case),
        ("gamma_forged", gamma_forged_case),
        ("gamma_run", gamma_run_case),
        ("gamma_init", gamma_init_case),
        ("gamma_deadlock", gamma_deadlock_case),
        ("gamma_offer_left", gamma_offer_left_case),
    ]
}
