//! The inference server (exercise 8): batched answers equal the unbatched ones, a full queue
//! refuses at once, shutdown answers every accepted request, bad input is a 400 naming it,
//! /metrics is Prometheus text whose counters add up, and batches respect the knobs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpulab::device::Device;
use gpulab::nn::{HostLayer, MlpConfig};
use gpulab::serve::batcher::{self, Request};
use gpulab::serve::engine::softmax;
use gpulab::serve::loadgen::{self, Arrivals, LoadSpec, Outcome, Target};
use gpulab::serve::metrics::ServerMetrics;
use gpulab::serve::{BatchPolicy, HostModel, InferenceEngine, ServeConfig, Server, SubmitError};

use super::common::{random, require_gpu};

/// A model of odd widths with random weights.
fn model() -> HostModel {
    let arch = MlpConfig { input: 13, hidden: vec![17, 9], classes: 5, conv: None };
    let layers = arch
        .widths()
        .windows(2)
        .enumerate()
        .map(|(i, w)| HostLayer {
            weight: random(w[0] * w[1], 10 + i as u64, -0.5, 0.5),
            shape: [w[0], w[1]],
            bias: random(w[1], 20 + i as u64, -0.1, 0.1),
        })
        .collect();
    HostModel { arch, layers, version: "test-1".into(), source: "random weights".into(), int8: None }
}

fn expected(m: &HostModel, x: &[f32]) -> (usize, Vec<f32>) {
    softmax(&m.logits_host(x))
}

fn policy(max_batch: usize, delay_us: u64, queue: usize) -> BatchPolicy {
    BatchPolicy { max_batch, preferred: vec![], max_queue_delay_us: delay_us, queue_capacity: queue }
}

/// Many threads submit at once; every sample gets exactly one answer, equal to the host's
/// unbatched prediction, in batches no larger than max batch.
fn concurrent_answers_match(device: Device) {
    let m = model();
    let (queue, batches) = batcher::queue(policy(8, 1000, 4096), m.arch.input);
    let metrics = ServerMetrics::new("t", "t", false).unwrap();
    let engine = InferenceEngine::start(device, m.clone(), batches, metrics.engine.clone()).unwrap();
    let inputs = loadgen::random_inputs(13, 400, 3);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (q, m, inputs) = (queue.clone(), &m, &inputs);
            s.spawn(move || {
                for (i, x) in inputs.iter().enumerate().skip(t).step_by(4) {
                    let mut rx = q.submit(vec![x.clone()]).expect("room in the queue");
                    let p = rx.pop().unwrap().blocking_recv().expect("exactly one reply").expect("a prediction");
                    let (class, probs) = expected(m, x);
                    assert!(p.batch_size >= 1 && p.batch_size <= 8, "batch of {}", p.batch_size);
                    for (g, w) in p.probabilities.iter().zip(&probs) {
                        assert!((g - w).abs() < 1e-4, "input {i}: probability {g} vs unbatched {w}");
                    }
                    let margin = probs[class] - probs.iter().enumerate().filter(|(j, _)| *j != class).map(|(_, v)| *v).fold(0.0, f32::max);
                    assert!(p.class == class || margin < 1e-4, "input {i}: class {} vs unbatched {class}", p.class);
                }
            });
        }
    });
    drop(queue);
    let totals = engine.join().unwrap();
    assert_eq!(totals.samples, 400);
    assert!(totals.batch_sizes.keys().all(|&b| (1..=8).contains(&b)), "{:?}", totals.batch_sizes);
    // A GPU counts its work: one wait per batch, and one submission per batch apart from the
    // first batch of each new size (its workspace's zero-fill is submitted before the upload).
    if let Some(c) = totals.device_counts {
        assert_eq!(c.waits, totals.batches, "one wait per batch: {c:?}");
        assert!(c.submits >= totals.batches && c.submits <= totals.batches + totals.batch_sizes.len() as u64, "{c:?} {totals:?}");
    }
}

#[test]
fn concurrent_requests_get_the_unbatched_answer_on_cpu() {
    concurrent_answers_match(Device::Cpu);
}

#[test]
fn concurrent_requests_get_the_unbatched_answer_on_the_gpu() {
    let device = Device::Gpu(gpulab::device::GpuSelector::Auto);
    if let Err(e) = device.open(None) {
        assert!(!require_gpu(), "GPULAB_REQUIRE_GPU=1 but no GPU: {e}");
        eprintln!("SKIPPED: no GPU adapter ({e})");
        return;
    }
    concurrent_answers_match(device);
}

#[test]
fn cuda_says_it_is_unavailable() {
    let m = model();
    let (_q, batches) = batcher::queue(policy(4, 0, 8), 13);
    let metrics = ServerMetrics::new("t", "t", false).unwrap();
    let err = InferenceEngine::start(Device::Cuda(0), m, batches, metrics.engine.clone()).err().expect("no CUDA here").to_string();
    assert!(err.contains("CUDA"), "{err}");
}

#[test]
fn a_full_queue_refuses_at_once_and_a_checked_input_names_the_problem() {
    let (q, batches) = batcher::queue(policy(4, 0, 3), 2);
    assert!(q.submit(vec![vec![0.0, 1.0]; 2]).is_ok());
    let t0 = Instant::now();
    assert_eq!(q.submit(vec![vec![0.0, 1.0]; 2]).err(), Some(SubmitError::Full { capacity: 3 }), "all or nothing");
    assert!(q.submit(vec![vec![0.0, 1.0]]).is_ok());
    assert_eq!(q.submit(vec![vec![0.0, 1.0]]).err(), Some(SubmitError::Full { capacity: 3 }));
    assert!(t0.elapsed() < Duration::from_secs(1));
    match q.submit(vec![vec![0.0, f32::NAN]]) {
        Err(SubmitError::BadInput(m)) => assert!(m.contains("feature 1") && m.contains("finite"), "{m}"),
        other => panic!("NaN accepted: {:?}", other.map(|_| ())),
    }
    let mut b = Vec::new();
    batches.next_batch(&mut b).unwrap();
    assert_eq!(b.len(), 3, "what was queued comes out");
    assert_eq!(q.depth(), 0);
}

/// A producer at random gaps; every formed batch is at most max batch, and its oldest sample
/// waited at most the max queue delay plus generous scheduling slack.
#[test]
fn batches_respect_max_batch_and_max_queue_delay() {
    let delay = Duration::from_millis(5);
    let (q, batches) =
        batcher::queue(BatchPolicy { max_batch: 6, preferred: vec![4], max_queue_delay_us: 5000, queue_capacity: 10_000 }, 1);
    let producer = std::thread::spawn(move || {
        let gaps = random(600, 7, 0.0, 400.0);
        let mut rxs = Vec::new();
        for g in gaps {
            std::thread::sleep(Duration::from_micros(g as u64));
            rxs.extend(q.submit(vec![vec![1.0]]).unwrap());
        }
        rxs.len()
    });
    let mut sizes = Vec::new();
    let mut worst = Duration::ZERO;
    let mut b: Vec<Request> = Vec::new();
    while batches.next_batch(&mut b).is_some() {
        let now = Instant::now();
        sizes.push(b.len());
        worst = worst.max(b.iter().map(|r| now - r.enqueued).max().unwrap());
        assert!(b.len() <= 6, "batch of {}", b.len());
    }
    assert_eq!(producer.join().unwrap(), sizes.iter().sum::<usize>());
    assert!(sizes.iter().any(|&s| s > 1), "some batching happened: {sizes:?}");
    assert!(worst <= delay + Duration::from_millis(250), "oldest sample waited {worst:?} with a 5 ms max queue delay");
}

// ---- over HTTP ----

struct Reply {
    status: u16,
    head: String,
    body: String,
}

/// One HTTP/1.1 request on its own connection (Connection: close).
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Reply { status, head: head.to_ascii_lowercase(), body: body.to_string() }
}

fn start(policy: BatchPolicy, max_body: usize) -> Server {
    let mut cfg = ServeConfig::new(Device::Cpu, policy);
    cfg.limits.max_body_bytes = max_body;
    Server::start(cfg, model()).unwrap()
}

/// The value of every `name{labels}` sample; panics on a line that is not Prometheus text.
fn parse_prometheus(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(c) = line.strip_prefix('#') {
            assert!(c.starts_with(" HELP ") || c.starts_with(" TYPE "), "bad comment line {line:?}");
            continue;
        }
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value in {line:?}"));
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("value {value:?} in {line:?}"));
        let bare = name.split('{').next().unwrap();
        assert!(!bare.is_empty() && bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "metric name {bare:?}");
        assert!(!name.contains('{') || name.ends_with('}'), "labels of {line:?}");
        out.push((name.to_string(), v));
    }
    out
}

#[test]
fn http_predicts_rejects_bad_input_and_counts_every_response() {
    let mut server = start(policy(4, 500, 64), 4096);
    let a = server.addr;
    let m = model();
    let x: Vec<f32> = random(13, 5, 0.0, 1.0);
    let ok = http(a, "POST", "/v1/predict", &serde_json::json!({ "inputs": [x, x] }).to_string());
    assert_eq!(ok.status, 200, "{}", ok.body);
    let r: gpulab::serve::http::PredictResponse = serde_json::from_str(&ok.body).unwrap();
    assert_eq!(r.predictions.len(), 2);
    let (class, probs) = expected(&m, &x);
    assert_eq!(r.predictions[0].class, class);
    assert!(r.predictions[0].probabilities.iter().zip(&probs).all(|(g, w)| (g - w).abs() < 1e-4));
    let cases = [
        ("{\"inputs\": [[0.1,", "malformed JSON"),
        ("{\"input\": [1, 2]}", "has 2 features; the model takes 13"),
        (&format!("{{\"input\": [{}NaN]}}", "0,".repeat(12)), "malformed JSON"),
        (&format!("{{\"input\": [{}1e999]}}", "0,".repeat(12)), "malformed JSON"),
        (&format!("{{\"input\": [{}1e39]}}", "0,".repeat(12)), "number out of range"),
        ("{\"inputs\": []}", "empty"),
        ("{\"extra\": 1, \"input\": [1]}", "unknown field"),
        ("{}", "the body needs"),
    ];
    for (body, want) in cases {
        let r = http(a, "POST", "/v1/predict", body);
        assert_eq!(r.status, 400, "{body:.60}: {}", r.body);
        assert!(r.body.contains(want), "{body:.60}: {} lacks {want:?}", r.body);
    }
    let large = http(a, "POST", "/v1/predict", &format!("{{\"input\": [{}0]}}", "0.000000000000001,".repeat(400)));
    assert_eq!(large.status, 413, "{}", large.body);
    assert!(large.body.contains("at most 4096"), "{}", large.body);
    let again = http(a, "POST", "/v1/predict", &serde_json::json!({ "input": x }).to_string());
    assert_eq!(again.status, 200, "still serving after bad input");
    let health = http(a, "GET", "/healthz", "");
    assert!(health.status == 200 && health.body.contains("\"features\":13"), "{}", health.body);

    let metrics = http(a, "GET", "/metrics", "");
    assert_eq!(metrics.status, 200);
    let samples = parse_prometheus(&metrics.body);
    let get = |n: &str| samples.iter().filter(|(k, _)| k == n || k.starts_with(&format!("{n}{{"))).map(|(_, v)| v).sum::<f64>();
    let requests = get("gpulab_requests_total");
    assert_eq!(requests, 3.0 + cases.len() as f64);
    assert_eq!(get("gpulab_responses_total"), requests, "requests = responses by status");
    assert_eq!(get("gpulab_responses_total{status=\"400\"}"), cases.len() as f64);
    assert_eq!(get("gpulab_responses_total{status=\"413\"}"), 1.0);
    assert_eq!(get("gpulab_predictions_total"), 3.0);
    assert_eq!(get("gpulab_request_duration_seconds_count"), requests);
    assert!(get("gpulab_model_info{version=\"test-1\",backend=\"cpu\"}") == 1.0, "{}", metrics.body);
    assert!(samples.iter().any(|(k, _)| k.starts_with("gpulab_batch_size_bucket")));
    server.shutdown();
    server.wait().unwrap();
}

#[test]
fn a_full_server_answers_503_with_retry_after_at_once() {
    let mut server = start(policy(1, 0, 1), 1 << 20);
    let big = serde_json::json!({ "inputs": vec![random(13, 1, 0.0, 1.0); 1] }).to_string();
    let mut saw_503 = false;
    for _round in 0..20 {
        let replies: Vec<(Reply, Duration)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..48)
                .map(|_| {
                    s.spawn(|| {
                        let t0 = Instant::now();
                        let r = http(server.addr, "POST", "/v1/predict", &big);
                        (r, t0.elapsed())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (r, took) in &replies {
            assert!(r.status == 200 || r.status == 503, "status {}: {}", r.status, r.body);
            if r.status == 503 {
                saw_503 = true;
                assert!(r.head.contains("retry-after: 1"), "{}", r.head);
                assert!(r.body.contains("queue is full"), "{}", r.body);
                assert!(*took < Duration::from_secs(5), "a refusal took {took:?}");
            }
        }
        if saw_503 {
            break;
        }
    }
    assert!(saw_503, "48 concurrent requests never overflowed a queue of 1");
    server.shutdown();
    server.wait().unwrap();
}

#[test]
fn shutdown_answers_every_accepted_request_and_the_loadgen_bounds_itself() {
    let mut server = start(BatchPolicy { max_batch: 8, preferred: vec![], max_queue_delay_us: 20_000, queue_capacity: 100_000 }, 1 << 20);
    let url = format!("http://{}", server.addr);
    let spec = LoadSpec {
        arrivals: Arrivals::Open { rate_per_s: 400.0 },
        duration: Duration::from_secs(30),
        max_requests: 100_000,
        drain: Duration::from_secs(20),
        seed: 9,
    };
    let target = Target::http(&url).unwrap();
    let inputs = loadgen::random_inputs(13, 16, 1);
    let load = std::thread::spawn(move || loadgen::run(&target, &inputs, &spec).unwrap());
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    server.shutdown();
    let totals = server.wait().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(25), "shutdown took {:?}", t0.elapsed());
    let result = load.join().unwrap();
    let s = result.summary();
    assert!(s.ok > 0);
    assert_eq!(totals.samples as usize, s.ok, "every sample the engine ran reached its client");
    // After the listener closed, requests fail to connect; none was accepted and dropped.
    assert_eq!(s.unanswered, 0);
    assert!(
        result.samples.iter().filter(|x| x.outcome == Outcome::Failed).all(|x| x.due_s > 1.0),
        "failures only after the shutdown began"
    );
    assert!(result.wall_s < 30.0 + 20.0 + 5.0, "the load generator is bounded in time");
}

#[test]
fn in_process_open_loop_counts_latency_from_the_scheduled_arrival() {
    let m = model();
    let (queue, batches) = batcher::queue(policy(16, 2000, 4096), 13);
    let metrics = ServerMetrics::new("t", "t", false).unwrap();
    let engine = InferenceEngine::start(Device::Cpu, m, batches, metrics.engine.clone()).unwrap();
    let spec = LoadSpec {
        arrivals: Arrivals::Open { rate_per_s: 300.0 },
        duration: Duration::from_secs(1),
        max_requests: 150,
        drain: Duration::from_secs(10),
        seed: 2,
    };
    let r = loadgen::run(&Target::InProcess(queue.clone()), &loadgen::random_inputs(13, 8, 4), &spec).unwrap();
    let s = r.summary();
    assert!(s.sent <= 150 && s.sent > 0);
    assert_eq!(s.ok, s.sent);
    assert!(r.samples.iter().all(|x| x.due_s < 1.0 && x.latency_s >= x.queue_wait_s.unwrap()));
    assert!(s.p50_ms <= s.p90_ms && s.p90_ms <= s.p99_ms && s.p99_ms <= s.max_ms);
    assert_eq!(s.batch_sizes.iter().map(|(_, n)| n).sum::<usize>(), s.ok);
    let bad = LoadSpec { arrivals: Arrivals::Open { rate_per_s: f64::NAN }, ..spec };
    assert!(loadgen::run(&Target::InProcess(queue.clone()), &[vec![0.0; 13]], &bad).unwrap_err().to_string().contains("rate"));
    drop(queue);
    engine.join().unwrap();
}

#[test]
fn absurd_settings_are_refused_by_name() {
    let e = |p: BatchPolicy| p.validate().unwrap_err().to_string();
    assert!(e(policy(0, 0, 1)).contains("max batch"));
    assert!(e(BatchPolicy { preferred: vec![32], ..policy(16, 0, 8) }).contains("preferred batch size 32"));
    assert!(e(policy(4, 60_000_000, 8)).contains("max queue delay"));
    assert!(e(policy(4, 0, 0)).contains("queue capacity"));
    assert!(Target::http("http://example.com:80").err().unwrap().to_string().contains("loopback"));
    assert!(Target::http("ftp://127.0.0.1").err().unwrap().to_string().contains("http://"));
}

#[test]
fn serves_an_exercise_5_checkpoint_and_names_a_damaged_or_misshapen_one() {
    use gpulab::checkpoint::{format, store};
    let tmp = tempfile::tempdir().unwrap();
    super::checkpoint::train(&super::checkpoint::small_spec(tmp.path(), gpulab::nn::OptimizerKind::Sgd, 50));
    let p = store::list(tmp.path()).unwrap().into_iter().next().expect("a checkpoint");
    let m = gpulab::serve::model::from_checkpoint(&p).unwrap();
    assert_eq!(m.arch.describe(), "64-24-16-10");
    assert!(m.version.contains("step"), "{}", m.version);
    let mut server = Server::start(ServeConfig::new(Device::Cpu, policy(4, 200, 16)), m.clone()).unwrap();
    let x = random(64, 8, 0.0, 1.0);
    let r = http(server.addr, "POST", "/v1/predict", &serde_json::json!({ "input": x }).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let r: gpulab::serve::http::PredictResponse = serde_json::from_str(&r.body).unwrap();
    assert_eq!(r.predictions[0].class, expected(&m, &x).0);
    server.shutdown();
    server.wait().unwrap();

    let ck = store::read(&p).unwrap();
    let mut tensors = ck.tensors.clone();
    tensors.insert("layers.1.bias".into(), format::NamedTensor::f32(vec![2, 8], vec![0.0; 16]));
    let q = tmp.path().join("misshapen.safetensors");
    std::fs::write(&q, format::encode(&ck.meta, &tensors).unwrap()).unwrap();
    let e = gpulab::serve::model::from_checkpoint(&q).unwrap_err().to_string();
    assert!(e.contains("layers.1.bias"), "{e}");
    let junk = tmp.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a checkpoint").unwrap();
    let e = gpulab::serve::model::from_checkpoint(&junk).unwrap_err().to_string();
    assert!(e.contains("junk.safetensors"), "{e}");
    let mut m = model();
    m.layers[1].weight.pop();
    assert!(m.validate().unwrap_err().to_string().contains("layer 1"));
}

#[test]
fn exercise_8_measures_static_and_dynamic_batching_to_a_computed_verdict() {
    use gpulab::exercises::{self, CollectSink, Event, live};
    let ex = exercises::find("inference-batching").unwrap();
    let mut s = ex.settings();
    let set = |s: &mut gpulab::exercises::Settings, pairs: &[&str]| s.apply(&pairs.iter().map(|p| p.to_string()).collect::<Vec<_>>());
    set(
        &mut s,
        &[
            "backend=cpu",
            "train_epochs=1",
            "static_batches=1,4",
            "max_batch=4",
            "preferred_batch=4",
            "load_levels=30,300",
            "run_seconds=0.5",
            "slo_p99_ms=1000",
        ],
    )
    .unwrap();
    let mut bad = s.clone();
    set(&mut bad, &["preferred_batch=8"]).unwrap();
    assert!(ex.validate(&bad).unwrap_err().to_string().contains("preferred batch size 8"));
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap();
    let statics = r.table("Static batching").unwrap();
    assert_eq!(statics.rows.len(), 2);
    let dynamic = r.table("Dynamic batching sweep").unwrap();
    assert_eq!(dynamic.rows.len(), 2);
    let mem = r.table("Memory: inference vs training (same batch)").unwrap();
    let total = mem.rows.last().unwrap();
    match (&total[1], &total[2]) {
        (gpulab::report::Cell::Num(i), gpulab::report::Cell::Num(t)) => assert!(i < t, "inference {i} KiB vs training {t} KiB"),
        other => panic!("{other:?}"),
    }
    assert!(!r.verdict.summary.is_empty() && r.verdict.evidence.iter().any(|e| e.contains("saturated at")), "{:?}", r.verdict);
    assert!(r.chart("latency_throughput").is_some() && r.chart("formed_batches").is_some());
    assert!(live::undeclared_ids(&ex.live_charts(), &sink.events).is_empty());
    assert!(sink.events.iter().any(|e| matches!(e, Event::Point { chart, .. } if chart == "latency")));
}

/// Exercise 9's int8 file served (`ModelSource::Int8`): every answer equals the in-process
/// int8 forward (`DenseStack::quantized`) of the same file on the CPU (probabilities within 1e-4, the same class
/// unless the top two are closer than that), batched or not, on `device`.
fn served_int8_matches_quant_mlp(device: Device) {
    use gpulab::nn::DenseStack;
    use gpulab::quant::{ObserverKind, calibrate, export, quantize_model};
    use gpulab::tensor::{MemCategory, QuantGranularity, prelude::*};
    let host = model();
    let layers = host.layers.clone();
    let inputs = loadgen::random_inputs(13, 60, 5);
    let flat: Vec<f32> = inputs.concat();
    let cpu = &mut gpulab::device::CpuBackend::new();
    let ranges = calibrate(cpu, &layers, &flat, 16, ObserverKind::MinMax).unwrap();
    let q = quantize_model(cpu, &layers, Some(&ranges), QuantGranularity::PerChannel).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("model.int8.safetensors");
    export::save(&path, &q, &[]).unwrap();
    let served = gpulab::serve::load_model(&gpulab::serve::ModelSource::Int8(path.clone())).unwrap();
    assert!(served.int8.is_some() && served.version.contains("int8"), "{}", served.version);
    let mlp = DenseStack::quantized(cpu, &q).unwrap();
    let x = cpu.upload_f32(&flat, [inputs.len(), 13], MemCategory::Inputs).unwrap();
    let y = mlp.forward(cpu, &x).unwrap();
    let want = cpu.read_f32(&y).unwrap();

    let (queue, batches) = batcher::queue(policy(8, 1000, 4096), 13);
    let metrics = ServerMetrics::new("t", "t", false).unwrap();
    let engine = InferenceEngine::start(device, served, batches, metrics.engine.clone()).unwrap();
    // Two at a time and one by one: batching must not change an int8 answer (static scales).
    let mut replies = Vec::new();
    for pair in inputs.chunks(2) {
        replies.extend(queue.submit(pair.to_vec()).expect("room in the queue"));
    }
    for (i, rx) in replies.into_iter().enumerate() {
        let p = rx.blocking_recv().expect("exactly one reply").expect("a prediction");
        let (class, probs) = softmax(&want[i * 5..][..5]);
        for (g, w) in p.probabilities.iter().zip(&probs) {
            assert!((g - w).abs() < 1e-4, "input {i}: served probability {g} vs the in-process int8 forward {w}");
        }
        let margin = probs[class] - probs.iter().enumerate().filter(|(j, _)| *j != class).map(|(_, v)| *v).fold(0.0, f32::max);
        assert!(p.class == class || margin < 1e-4, "input {i}: class {} vs the in-process int8 forward {class}", p.class);
    }
    drop(queue);
    assert_eq!(engine.join().unwrap().samples, 60);

    // A foreign or damaged file is refused by name, never served.
    let junk = tmp.path().join("junk.int8.safetensors");
    std::fs::write(&junk, b"not a model").unwrap();
    let e = gpulab::serve::load_model(&gpulab::serve::ModelSource::Int8(junk)).unwrap_err().to_string();
    assert!(e.contains("junk.int8.safetensors") && e.contains("not a usable gpulab int8 model"), "{e}");
    let bytes = std::fs::read(&path).unwrap();
    let cut = tmp.path().join("cut.int8.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let e = gpulab::serve::load_model(&gpulab::serve::ModelSource::Int8(cut)).unwrap_err().to_string();
    assert!(e.contains("cut.int8.safetensors"), "{e}");
    let missing =
        gpulab::serve::load_model(&gpulab::serve::ModelSource::Int8(tmp.path().join("absent.safetensors"))).unwrap_err().to_string();
    assert!(missing.contains("absent.safetensors"), "{missing}");
}

#[test]
fn a_served_int8_model_answers_like_quant_mlp_on_cpu() {
    served_int8_matches_quant_mlp(Device::Cpu);
}

#[test]
fn a_served_int8_model_answers_like_quant_mlp_on_the_gpu() {
    let device = Device::Gpu(gpulab::device::GpuSelector::Auto);
    if let Err(e) = device.open(None) {
        assert!(!require_gpu(), "GPULAB_REQUIRE_GPU=1 but no GPU: {e}");
        eprintln!("SKIPPED: no GPU adapter ({e})");
        return;
    }
    served_int8_matches_quant_mlp(device);
}
