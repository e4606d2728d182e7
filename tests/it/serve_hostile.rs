//! The inference server under hostile clients (issue 34), each bounded in count and time and on
//! loopback only: clients that send headers or bodies a byte at a time, hold connections, never
//! read their answers, send bodies that would amplify into memory, or come from a web page; an
//! inference thread that dies; and `gpulab serve` stopped with stuck clients attached.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpulab::device::Device;
use gpulab::nn::{HostLayer, MlpConfig};
use gpulab::serve::{BatchPolicy, Fault, HostModel, ServeConfig, Server};

use super::common::random;

fn model() -> HostModel {
    let arch = MlpConfig { input: 13, hidden: vec![9], classes: 5, conv: None };
    let layers = arch
        .widths()
        .windows(2)
        .enumerate()
        .map(|(i, w)| HostLayer { weight: random(w[0] * w[1], 40 + i as u64, -0.5, 0.5), shape: [w[0], w[1]], bias: vec![0.0; w[1]] })
        .collect();
    HostModel { arch, layers, version: "hostile-1".into(), source: "random weights".into(), int8: None }
}

fn config(edit: impl FnOnce(&mut ServeConfig)) -> ServeConfig {
    let mut cfg =
        ServeConfig::new(Device::Cpu, BatchPolicy { max_batch: 8, preferred: vec![], max_queue_delay_us: 200, queue_capacity: 256 });
    edit(&mut cfg);
    cfg
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Sends `head` (and `body`) and reads the whole answer: (status, the raw text).
fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = connect(addr);
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    read_answer(&mut s)
}

fn read_answer(s: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    (text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), text)
}

fn post_head(addr: SocketAddr, len: usize, extra: &str) -> String {
    format!(
        "POST /v1/predict HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n{extra}\r\n"
    )
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"), b"")
}

/// Whether the server has closed `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {} // an error response before the close
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
    false
}

/// `wait` on a thread: the server's result, or None if it has not stopped within `limit`
/// (the test then fails instead of hanging).
fn wait_at_most(server: Server, limit: Duration) -> Option<gpulab::error::Result<gpulab::serve::Stopped>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.wait_stopped());
    });
    rx.recv_timeout(limit).ok()
}

/// A client that sends half a request line and then nothing (slowloris) is closed at the
/// header timeout, and so is an idle keep-alive connection.
#[test]
fn slow_or_idle_clients_are_closed_at_the_header_timeout() {
    let mut server = Server::start(config(|c| c.limits.header_timeout = Duration::from_millis(300)), model()).unwrap();
    let mut slow = connect(server.addr);
    slow.write_all(b"POST /v1/predict HTTP/1.1\r\nHost: ").unwrap();
    let mut idle = connect(server.addr);
    let t0 = Instant::now();
    assert!(closed_within(&mut slow, Duration::from_secs(5)), "a half-sent header held its connection for 5 s");
    assert!(closed_within(&mut idle, Duration::from_secs(5)), "an idle connection was kept for 5 s");
    assert!(t0.elapsed() >= Duration::from_millis(250), "closed before the timeout: {:?}", t0.elapsed());
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// A shutdown with 50 clients stuck in their headers ends within the grace period plus a
/// little: the stuck connections are dropped, and the count says so.
#[test]
fn shutdown_drops_stuck_clients_at_the_grace_deadline() {
    let cfg = config(|c| {
        c.limits.header_timeout = Duration::from_secs(600);
        c.limits.shutdown_grace = Duration::from_millis(500);
    });
    let mut server = Server::start(cfg, model()).unwrap();
    let stuck: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = connect(server.addr);
            s.write_all(b"POST /v1/predict HTTP/1.1\r\nX-Slow: 1\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200)); // all accepted
    let t0 = Instant::now();
    server.shutdown();
    let stopped =
        wait_at_most(server, Duration::from_secs(10)).expect("the server still runs 10 s after shutdown with stuck clients").unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    assert_eq!(stopped.dropped_connections, 50);
    drop(stuck);
}

/// A body larger than the limit is refused from its Content-Length before a byte of it is
/// read; one that trickles in is cut at the body timeout.
#[test]
fn oversized_and_slow_bodies_are_refused_without_waiting_for_them() {
    let cfg = config(|c| {
        c.limits.max_body_bytes = 1 << 20;
        c.limits.body_timeout = Duration::from_millis(400);
    });
    let mut server = Server::start(cfg, model()).unwrap();
    let a = server.addr;
    // Headers only: a server that waited for the body would wait here.
    let (status, text) = exchange(a, &post_head(a, 1 << 30, ""), b"");
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("at most 1048576"), "{text}");
    let mut slow = connect(a);
    slow.write_all(post_head(a, 1000, "").as_bytes()).unwrap();
    slow.write_all(b"{\"input\": [").unwrap();
    let t0 = Instant::now();
    let (status, text) = read_answer(&mut slow);
    assert_eq!(status, 408, "{text}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// The amplification case: millions of empty vectors are refused at the first (400, at once);
/// more samples than the queue holds are refused as too large (413) before they are built.
#[test]
fn bodies_of_many_small_vectors_are_refused_before_they_are_built() {
    let mut server = Server::start(config(|_| {}), model()).unwrap();
    let a = server.addr;
    let mut empties = String::from("{\"inputs\": [");
    empties.push_str(&"[],".repeat((15 << 20) / 3));
    empties.push_str("[]]}");
    let (status, text) = exchange(a, &post_head(a, empties.len(), ""), empties.as_bytes());
    assert_eq!(status, 400, "{text:.300}");
    assert!(text.contains("input 0 has 0 features"), "{text:.300}");
    let row = format!("[{}]", vec!["0.5"; 13].join(","));
    let many = format!("{{\"inputs\": [{}]}}", vec![row; 257].join(","));
    let (status, text) = exchange(a, &post_head(a, many.len(), ""), many.as_bytes());
    assert_eq!(status, 413, "{text:.300}");
    assert!(text.contains("at most 256"), "{text:.300}");
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// Past the connection cap a client gets 503 at once; the connections in use keep working.
#[test]
fn the_connection_cap_refuses_one_more() {
    let mut server = Server::start(config(|c| c.limits.max_connections = 4), model()).unwrap();
    let a = server.addr;
    let held: Vec<TcpStream> = (0..4).map(|_| connect(a)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (status, text) = get(a, "/healthz");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("too many connections"), "{text}");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(a, "/healthz").0 != 200 {
        assert!(Instant::now() < deadline, "connections freed but still refused");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, metrics) = get(a, "/metrics");
    assert!(metrics.lines().any(|l| l.starts_with("gpulab_connections_refused_total ") && !l.ends_with(" 0")), "{metrics}");
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// Five clients that send only headers declaring the largest body (16 MiB each, 80 MiB against
/// the 64 MiB budget) and then nothing: a normal small predict is still answered at once, not
/// queued behind them until their body timeout (it waited 9.5 s when the budget was reserved
/// from the declared length before a byte arrived).
#[test]
fn silent_clients_declaring_large_bodies_do_not_hold_the_body_budget() {
    let mut server = Server::start(config(|_| {}), model()).unwrap();
    let a = server.addr;
    let silent: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut s = connect(a);
            s.write_all(post_head(a, 16 << 20, "").as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let body = format!("{{\"input\": [{}]}}", vec!["0.25"; 13].join(","));
    let t0 = Instant::now();
    let (status, text) = exchange(a, &post_head(a, body.len(), ""), body.as_bytes());
    let took = t0.elapsed();
    assert_eq!(status, 200, "{text:.300}");
    assert!(took < Duration::from_secs(2), "a small predict waited {took:?} behind silent large bodies");
    drop(silent);
    server.shutdown();
    wait_at_most(server, Duration::from_secs(15)).expect("stops").unwrap();
}

/// The request-head limit the server enforces is the one it states (64 KiB, `limits::MAX_HEAD_BYTES`):
/// a head a little under it is served, one a little over it is refused (431). Before, hyper's
/// buffer let heads of up to about 128 KiB through.
#[test]
fn the_request_head_limit_is_the_stated_one() {
    let mut server = Server::start(config(|_| {}), model()).unwrap();
    let a = server.addr;
    let head = |pad: usize| format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\nX-Pad: {}\r\nConnection: close\r\n\r\n", "a".repeat(pad));
    let (status, text) = exchange(a, &head(60 << 10), b"");
    assert_eq!(status, 200, "{text:.300}");
    let (status, text) = exchange(a, &head(80 << 10), b"");
    assert_eq!(status, 431, "an 80 KiB head: {text:.300}");
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// A client that sends requests and never reads the answers is closed once the server's
/// writes have made no progress for the write timeout; the server keeps answering others.
#[test]
fn a_client_that_never_reads_is_closed_at_the_write_timeout() {
    let mut server = Server::start(config(|c| c.limits.write_timeout = Duration::from_millis(300)), model()).unwrap();
    let a = server.addr;
    let mut greedy = connect(a);
    greedy.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let one = format!("GET /metrics HTTP/1.1\r\nHost: {a}\r\n\r\n");
    // Far more answer bytes than the two socket buffers hold; stop writing once the server stops reading.
    for _ in 0..20_000 {
        if greedy.write_all(one.as_bytes()).is_err() {
            break;
        }
    }
    let open = |text: &str| {
        text.lines().find_map(|l| l.strip_prefix("gpulab_connections_open ")).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(-1.0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = get(a, "/metrics");
        assert_eq!(status, 200);
        if open(&text) == 1.0 {
            break; // only this request's own connection
        }
        assert!(Instant::now() < deadline, "the reader-less client still holds its connection: {}", open(&text));
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(greedy);
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// A web page cannot use the server: a foreign Host (DNS rebinding) or Origin (CSRF) is 403,
/// a body that is not JSON (what a form can send without a preflight) is 415; every refusal is
/// counted.
#[test]
fn requests_from_web_pages_are_refused() {
    let mut server = Server::start(config(|_| {}), model()).unwrap();
    let a = server.addr;
    let body = serde_json::json!({ "input": random(13, 3, 0.0, 1.0) }).to_string();
    let ok = post_head(a, body.len(), "");
    assert_eq!(exchange(a, &ok, body.as_bytes()).0, 200);
    let cases = [
        (ok.replace(&format!("Host: {a}"), &format!("Host: evil.example:{}", a.port())), 403, "is not this server"),
        (ok.replace(&format!("Host: {a}"), "Host: 127.0.0.1:1"), 403, "is not this server"),
        (post_head(a, body.len(), "Origin: http://evil.example\r\n"), 403, "cross-origin"),
        (post_head(a, body.len(), "Origin: null\r\n"), 403, "cross-origin"),
        (ok.replace("application/json", "text/plain"), 415, "not JSON"),
        (ok.replace("Content-Type: application/json\r\n", ""), 415, "not JSON"),
    ];
    for (head, want, says) in &cases {
        let (status, text) = exchange(a, head, body.as_bytes());
        assert_eq!(status, *want, "{head}\n{text}");
        assert!(text.contains(says), "{text}");
    }
    let rebound = format!("GET /metrics HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n", a.port());
    assert_eq!(exchange(a, &rebound, b"").0, 403, "a rebound page cannot read the metrics either");
    let (_, metrics) = get(a, "/metrics");
    let count = |status: u16| {
        let name = format!("gpulab_responses_total{{status=\"{status}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&name)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    assert_eq!((count(200), count(403), count(415)), (1.0, 4.0, 2.0), "{metrics}");
    server.shutdown();
    wait_at_most(server, Duration::from_secs(10)).expect("stops").unwrap();
}

/// The inference thread dies: requests get an error, and the server stops by itself with the
/// thread's error (the CLI's exit status).
#[test]
fn a_dead_inference_thread_stops_the_server_with_its_error() {
    let server = Server::start(config(|c| c.fault = Some(Fault { panic_after_batches: 1 })), model()).unwrap();
    let a = server.addr;
    let body = serde_json::json!({ "input": random(13, 3, 0.0, 1.0) }).to_string();
    assert_eq!(exchange(a, &post_head(a, body.len(), ""), body.as_bytes()).0, 200);
    let (status, text) = exchange(a, &post_head(a, body.len(), ""), body.as_bytes());
    assert!(status == 500 || status == 503, "{text}");
    let r = wait_at_most(server, Duration::from_secs(10)).expect("the server still runs 10 s after its inference thread died");
    let e = r.expect_err("a dead inference thread is an error").to_string();
    assert!(e.contains("panicked") && e.contains("fault injected"), "{e}");
}

/// `/healthz` reports the dead thread before the server has finished stopping.
#[test]
fn healthz_says_503_once_the_inference_thread_is_dead() {
    let cfg = config(|c| {
        c.fault = Some(Fault { panic_after_batches: 0 });
        c.limits.shutdown_grace = Duration::from_secs(5);
    });
    let server = Server::start(cfg, model()).unwrap();
    let a = server.addr;
    // A request begun before the thread dies is answered within the grace period.
    let mut kept = connect(a);
    kept.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\n").as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(200)); // the server has read the first half
    let body = serde_json::json!({ "input": random(13, 3, 0.0, 1.0) }).to_string();
    let _ = exchange(a, &post_head(a, body.len(), ""), body.as_bytes());
    std::thread::sleep(Duration::from_millis(300)); // the thread has unwound and said why
    kept.write_all(b"Connection: close\r\n\r\n").unwrap();
    let (status, text) = read_answer(&mut kept);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("\"status\":\"failed\"") && text.contains("fault injected"), "{text}");
    assert!(wait_at_most(server, Duration::from_secs(15)).expect("stops").is_err());
}

// ---- the binary ----

#[cfg(unix)]
mod binary {
    use super::*;
    use std::io::BufRead;
    use std::process::{Child, Command, Stdio};

    /// A `gpulab serve` process, killed if a test ends (or fails) while it still runs.
    struct Serving(Child);

    impl Drop for Serving {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// `gpulab serve` on a free port with a briefly trained model; returns it and its address.
    fn serve(extra: &[&str]) -> (Serving, SocketAddr) {
        let mut child = Serving(
            Command::new(env!("CARGO_BIN_EXE_gpulab"))
                .args(["serve", "--train-first", "--backend", "cpu", "--epochs", "1", "--port", "0"])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the binary runs"),
        );
        let mut lines = std::io::BufReader::new(child.0.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().expect("serve printed its address").unwrap();
            if let Some(rest) = line.split("serving on http://").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        (child, addr)
    }

    fn signal(child: &Serving, sig: &str) {
        assert!(Command::new("kill").args([sig, &child.0.id().to_string()]).status().unwrap().success());
    }

    /// The exit status, or None if it still runs after `limit`.
    fn exits_within(child: &mut Serving, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(s) = child.0.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// 50 clients stuck sending their headers one line every 500 ms.
    fn stuck_clients(addr: SocketAddr) -> Vec<TcpStream> {
        let socks: Vec<TcpStream> = (0..50)
            .map(|_| {
                let mut s = connect(addr);
                s.write_all(b"POST /v1/predict HTTP/1.1\r\n").unwrap();
                s
            })
            .collect();
        let clones: Vec<TcpStream> = socks.iter().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            for i in 0..20 {
                std::thread::sleep(Duration::from_millis(500));
                for mut s in &clones {
                    let _ = s.write_all(format!("X-Slow-{i}: 1\r\n").as_bytes());
                }
            }
        });
        socks
    }

    #[test]
    fn serve_exits_within_5_s_of_sigterm_with_stuck_clients() {
        let (mut child, addr) = serve(&[]);
        let _stuck = stuck_clients(addr);
        std::thread::sleep(Duration::from_millis(700));
        let t0 = Instant::now();
        signal(&child, "-TERM");
        let status = exits_within(&mut child, Duration::from_secs(10)).expect("still running 10 s after SIGTERM with stuck clients");
        assert!(t0.elapsed() < Duration::from_secs(5), "exited {:?} after SIGTERM", t0.elapsed());
        assert!(status.success(), "{status:?}");
    }

    #[test]
    fn a_second_ctrl_c_exits_at_once() {
        let (mut child, addr) = serve(&["--shutdown-grace", "60s", "--header-timeout", "60s"]);
        let _stuck = stuck_clients(addr);
        std::thread::sleep(Duration::from_millis(500));
        signal(&child, "-INT");
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        signal(&child, "-INT");
        let status = exits_within(&mut child, Duration::from_secs(10)).expect("still running 10 s after a second Ctrl-C");
        assert!(t0.elapsed() < Duration::from_secs(3), "exited {:?} after the second Ctrl-C", t0.elapsed());
        assert_eq!(status.code(), Some(130), "{status:?}");
    }

    /// A checkpoint (SGD, 4-3-2) whose `dataset` metadata is `dataset`.
    fn crafted_checkpoint(dataset: &str) -> Vec<u8> {
        use gpulab::checkpoint::CheckpointMeta;
        use gpulab::checkpoint::format::{self, NamedTensor, RngState};
        use gpulab::nn::OptimizerKind;
        use gpulab::train::{LoaderPosition, TrainConfig};
        let arch = MlpConfig { input: 4, hidden: vec![3], classes: 2, conv: None };
        let tensors = format::tensor_specs(&arch, OptimizerKind::Sgd)
            .into_iter()
            .map(|(name, shape)| {
                let n: usize = shape.iter().product();
                (name, NamedTensor::f32(shape, (0..n).map(|i| i as f32 * 0.125 - 0.5).collect()))
            })
            .collect();
        let cfg = TrainConfig { hidden: arch.hidden.clone(), optimizer: OptimizerKind::Sgd, ..TrainConfig::default() };
        let meta = CheckpointMeta {
            position: LoaderPosition { step: 3, epoch: 0, batch: 3 },
            optimizer_step: 3,
            rng: RngState { generator: "chacha8".into(), seed: cfg.seed, stream: 0 },
            grad_scaler: None,
            precision: "fp32".into(),
            hyperparameters: cfg,
            architecture: arch,
            dataset: dataset.into(),
            gpulab_version: "crafted".into(),
        };
        format::encode(&meta, &tensors).unwrap()
    }

    /// A checkpoint whose dataset text sets the terminal title and clears the screen: `gpulab
    /// serve` prints its source line with the escapes shown, not obeyed.
    #[test]
    fn serve_prints_a_checkpoints_text_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("evil\x1b[31m.safetensors");
        std::fs::write(&ckpt, crafted_checkpoint("digits\x1b]0;pwned\x07\x1b[2J\u{9b}31m\u{202e}")).unwrap();
        let mut child = Serving(
            Command::new(env!("CARGO_BIN_EXE_gpulab"))
                .args(["serve", "--backend", "cpu", "--port", "0", "--model"])
                .arg(&ckpt)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the binary runs"),
        );
        let mut err = std::io::BufReader::new(child.0.stderr.take().unwrap());
        let mut printed = Vec::new();
        // At most 20 lines: the model line comes before "serving on".
        for _ in 0..20 {
            let mut line = Vec::new();
            if err.read_until(b'\n', &mut line).unwrap() == 0 {
                break;
            }
            printed.extend_from_slice(&line);
            if line.starts_with(b"serving on") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&printed).into_owned();
        assert!(text.contains("serving on"), "{text}");
        assert!(text.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{9b}31m\\u{202e}"), "{text}");
        assert!(text.contains("evil\\u{1b}[31m"), "{text}");
        assert!(!printed.iter().any(|&b| b == 0x1b || b == 0x07), "raw control bytes reached the terminal: {text:?}");
        signal(&child, "-TERM");
        assert!(exits_within(&mut child, Duration::from_secs(10)).is_some_and(|s| s.success()));
    }

    /// Four 15 MiB bodies of empty vectors at once: the server's peak memory grows by little
    /// more than the bodies themselves (it grew by ~340 MB when they were parsed into vectors).
    #[cfg(target_os = "linux")]
    #[test]
    fn bodies_of_empty_vectors_do_not_amplify_memory() {
        let (mut child, addr) = serve(&[]);
        let kib = |field: &str| {
            let status = std::fs::read_to_string(format!("/proc/{}/status", child.0.id())).unwrap();
            status.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next()).unwrap().parse::<u64>().unwrap()
        };
        let before = kib("VmRSS:");
        let mut body = String::from("{\"inputs\": [");
        body.push_str(&"[],".repeat((15 << 20) / 3));
        body.push_str("[]]}");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let (status, text) = exchange(addr, &post_head(addr, body.len(), ""), body.as_bytes());
                    assert_eq!(status, 400, "{text:.200}");
                });
            }
        });
        let grew_mib = kib("VmHWM:").saturating_sub(before) / 1024;
        assert!(grew_mib < 160, "peak memory grew by {grew_mib} MiB for 60 MiB of bodies");
        signal(&child, "-TERM");
        assert!(exits_within(&mut child, Duration::from_secs(10)).is_some_and(|s| s.success()));
    }
}

/// A loopback "server" that answers each of `n` connections with `answer`.
fn fake_server(answer: Vec<u8>, n: usize) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().take(n) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&answer);
        }
    });
    addr
}

fn answer(status: &str, body: &[u8]) -> Vec<u8> {
    let mut a =
        format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
            .into_bytes();
    a.extend_from_slice(body);
    a
}

/// `gpulab loadgen` asks the server how wide its inputs are; it believes only a ready server,
/// a sane width and a bounded answer.
#[test]
fn loadgen_does_not_trust_what_healthz_says() {
    use gpulab::serve::loadgen::server_features;
    let url = |a: SocketAddr| format!("http://{a}");
    let e = server_features(&url(fake_server(answer("200 OK", b"{\"status\":\"ok\",\"features\":1000000000000}"), 1))).unwrap_err();
    assert!(e.to_string().contains("1000000000000 features"), "{e}");
    let failed = answer("503 Service Unavailable", b"{\"status\":\"failed\",\"reason\":\"the inference thread panicked\"}");
    let e = server_features(&url(fake_server(failed, 1))).unwrap_err();
    assert!(e.to_string().contains("not ready") && e.to_string().contains("panicked"), "{e}");
    let mut padded = vec![b' '; 4 << 20];
    padded.extend_from_slice(b"{\"status\":\"ok\",\"features\":13}");
    let e = server_features(&url(fake_server(answer("200 OK", &padded), 1))).unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
    assert_eq!(server_features(&url(fake_server(answer("200 OK", b"{\"status\":\"ok\",\"features\":13}"), 1))).unwrap(), 13);
}

/// A server that has gone (nothing listens on the port): the load generator backs off and stops
/// with a message saying so, instead of retrying the refused connection in a tight loop (about
/// 700,000 failures in 17 s before).
#[test]
fn loadgen_backs_off_and_stops_when_the_server_is_gone() {
    use gpulab::serve::loadgen::{self, Arrivals, LoadSpec, Target};
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let target = Target::http(&format!("http://{gone}")).unwrap();
    let spec = LoadSpec {
        arrivals: Arrivals::Closed { concurrency: 4 },
        duration: Duration::from_secs(4),
        max_requests: 1_000_000,
        drain: Duration::from_secs(1),
        seed: 1,
    };
    let t0 = Instant::now();
    let result = loadgen::run(&target, &[vec![0.5; 13]], &spec);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(8), "ran {took:?}");
    let e = result.map(|r| r.samples.len()).expect_err("a server that refuses every connection ends the run with an error");
    let msg = e.to_string();
    assert!(msg.contains("refused") && msg.contains(&gone.to_string()), "{msg}");
}
