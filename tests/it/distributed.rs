//! Data parallelism (exercise 6 and `gpulab::parallel`): N replicas against one device, bit-
//! exactness of buckets and overlap, refusals that name the setting, the exercise's report.

use gpulab::checkpoint::{Policy, store};
use gpulab::data::{self, Dataset};
use gpulab::exercises::{self, CollectSink, Event};
use gpulab::nn::{AmpConfig, ModelKind, Precision};
use gpulab::parallel::{self, DpCheckpoints, DpConfig, DpReport, ReplicaKind};
use gpulab::report::Provenance;
use gpulab::train::{TrainConfig, TrainEvent};

use crate::common::with_gpu;

fn digits() -> Dataset {
    data::load(&"digits".parse().unwrap(), 42).unwrap()
}

fn cfg(batch: usize) -> TrainConfig {
    TrainConfig { hidden: vec![48, 24], batch, epochs: 2, lr: 0.05, log_every: 4, ..Default::default() }
}

fn dp(replicas: usize, kind: ReplicaKind, bucket_cap_mb: f64, overlap: bool) -> DpConfig {
    DpConfig { replicas, kind, bucket_cap_mb, overlap, shard_optimizer: false, link: None, timeline_steps: 8, checkpoints: None }
}

fn cpu(replicas: usize) -> DpConfig {
    dp(replicas, ReplicaKind::Cpu { threads: 1 }, 25.0, false)
}

fn train(data: &Dataset, cfg: &TrainConfig, dp: &DpConfig) -> DpReport {
    parallel::train(data, cfg, dp, &mut gpulab::train::NullSink).unwrap_or_else(|e| panic!("{dp:?}: {e}"))
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn bits(p: &[Vec<f32>]) -> Vec<u32> {
    p.iter().flatten().map(|v| v.to_bits()).collect()
}

/// Two replicas on half batches each, gradients averaged, train the same model as one device
/// on the whole batch: equal up to the order of the additions (each replica's GEMM sums its 32
/// rows, then the two halves are added; one device sums all 64 in a row).
#[test]
fn two_cpu_replicas_train_what_one_device_trains_on_the_same_global_batch() {
    let data = digits();
    let c = cfg(64);
    let one = train(&data, &c, &cpu(1));
    let two = train(&data, &c, &cpu(2));
    assert_eq!((one.steps, two.steps), (2 * (data.train_len() / 64) as u64, one.steps));
    assert!(two.replicas_identical, "the replicas drifted apart");
    let d = max_diff(&one.params, &two.params);
    // Stated tolerance for CPU replicas: 1e-4 absolute after every step of two epochs.
    assert!(d <= 1e-4, "2 replicas differ from 1 by {d}");
    // The run trained: the parameters moved from their initial values.
    let untrained = train(&data, &TrainConfig { epochs: 1, lr: 1e-6, ..c.clone() }, &cpu(1));
    assert!(max_diff(&one.params, &untrained.params) > 1e-3);
    assert_eq!(two.per_replica_batch, 32);
    assert!(two.bytes_sent_per_step >= two.grad_bytes as f64, "each of 2 replicas sends 2·(1/2)·S per step");
    // And it is deterministic: the same run again gives the same bits.
    assert_eq!(bits(&train(&data, &c, &cpu(2)).params), bits(&two.params));
}

/// Buckets and overlap change when the sums are taken, never which sums: bit-identical.
#[test]
fn bucketing_and_overlap_change_no_result() {
    let data = digits();
    let c = cfg(64);
    let plain = train(&data, &c, &dp(2, ReplicaKind::Cpu { threads: 1 }, 25.0, false));
    let tiny = train(&data, &c, &dp(2, ReplicaKind::Cpu { threads: 1 }, 0.002, true));
    assert_eq!(plain.buckets, 1);
    assert!(tiny.buckets >= 3, "{} buckets", tiny.buckets);
    assert_eq!(bits(&plain.params), bits(&tiny.params));
    // Inline on CPU replicas the buckets are reduced in the gradient tensors themselves (no
    // staging): the same bits with many buckets as with one.
    let tiny_inline = train(&data, &c, &dp(2, ReplicaKind::Cpu { threads: 1 }, 0.002, false));
    assert_eq!(bits(&plain.params), bits(&tiny_inline.params));
    assert!(tiny.timeline.lanes.iter().any(|l| l.contains("all-reduce thread")), "{:?}", tiny.timeline.lanes);
    for lane in ["replica 0", "replica 1"] {
        assert!(tiny.timeline.total(lane, "compute") > 0.0, "{lane} has no compute spans");
    }
}

/// ZeRO-1 (each replica updates half the parameters between a reduce-scatter and an
/// all-gather) trains the very bits of the plain all-reduce and full update, with one bucket or
/// many, SGD or AdamW, sends the same bytes, holds half the optimizer state per replica, and
/// its timeline shows the all-gather after the shard's update.
#[test]
fn the_sharded_optimizer_step_trains_the_bits_of_the_full_step() {
    let data = digits();
    for c in [cfg(64), TrainConfig { optimizer: gpulab::nn::OptimizerKind::AdamW, lr: 0.01, weight_decay: 0.01, ..cfg(64) }] {
        for cap in [25.0, 0.002] {
            let plain = train(&data, &c, &dp(2, ReplicaKind::Cpu { threads: 1 }, cap, false));
            let sharded = train(&data, &c, &DpConfig { shard_optimizer: true, ..dp(2, ReplicaKind::Cpu { threads: 1 }, cap, false) });
            assert_eq!(bits(&plain.params), bits(&sharded.params), "{:?} cap {cap}", c.optimizer);
            assert!(sharded.replicas_identical);
            assert_eq!(sharded.bytes_sent_per_step, plain.bytes_sent_per_step, "the same bytes travel");
            assert_eq!(sharded.val_accuracy, plain.val_accuracy);
            // Each replica allocates only the optimizer state of what it updates: the ledger's
            // peaks are half the plain replicas' (to a few elements per bucket) and sum to it.
            let full = plain.optimizer_state_peak[0];
            assert!(full > 0 && plain.optimizer_state_peak.iter().all(|&p| p == full), "plain: {:?}", plain.optimizer_state_peak);
            assert_eq!(sharded.optimizer_state_peak.iter().sum::<u64>(), full, "the shards' state tiles the whole");
            for &p in &sharded.optimizer_state_peak {
                assert!((p as f64 / full as f64 - 0.5).abs() < 0.01, "a replica holds {p} B of {full} B");
            }
            for lane in ["replica 0", "replica 1"] {
                let comm: Vec<_> = sharded.timeline.spans.iter().filter(|s| s.lane == lane && s.name == "communication").collect();
                // Per step: the reduce-scatter (unless it hid entirely in idle) and the all-gather.
                assert!(
                    comm.len() >= sharded.timeline.spans.iter().filter(|s| s.lane == lane && s.name == "data").count(),
                    "{lane}: {} communication spans",
                    comm.len()
                );
            }
        }
    }
}

#[test]
fn bad_settings_name_the_setting_and_the_limit() {
    let data = digits();
    let refuse = |c: &TrainConfig, d: &DpConfig, words: &[&str]| {
        let e = parallel::train(&data, c, d, &mut gpulab::train::NullSink).expect_err("refused").to_string();
        for w in words {
            assert!(e.contains(w), "{e:?} lacks {w:?}");
        }
    };
    refuse(&cfg(64), &cpu(0), &["replicas", "at least 1"]);
    let cores = ReplicaKind::cores();
    refuse(&cfg(64 * (cores + 1)), &cpu(cores + 1), &["replicas", "threads_per_replica", &format!("{cores} CPU cores")]);
    refuse(&cfg(100), &dp(3, ReplicaKind::GpuDevices, 25.0, false), &["batch 100", "replicas 3", "multiple of 3"]);
    refuse(&cfg(4096), &cpu(1), &["4096", "training samples"]);
    refuse(&cfg(64), &dp(1, ReplicaKind::Cpu { threads: 1 }, 0.0, false), &["bucket_cap_mb"]);
    refuse(&cfg(64), &dp(2, ReplicaKind::Cuda, 25.0, false), &["CUDA"]);
    refuse(
        &cfg(64),
        &DpConfig { shard_optimizer: true, ..dp(2, ReplicaKind::Cpu { threads: 1 }, 25.0, true) },
        &["shard_optimizer", "overlap=false"],
    );
    refuse(&cfg(64), &DpConfig { shard_optimizer: true, ..dp(2, ReplicaKind::GpuDevices, 25.0, false) }, &["shard_optimizer", "kind=cpu"]);
    // Through the exercise's settings too.
    let ex = exercises::find("distributed").unwrap();
    let mut s = ex.settings();
    let e = s.apply(&["replicas=0".into()]).expect_err("0 replicas").to_string();
    assert!(e.contains("replicas"), "{e}");
    s.apply(&["replicas=1,3".into(), "batch=128".into(), "kind=gpu".into()]).unwrap();
    let e = ex.validate(&s).expect_err("128 / 3").to_string();
    assert!(e.contains("does not divide by replicas 3"), "{e}");
}

/// A stop from the watcher ends every replica after the same step (none is left waiting in
/// the ring), and what was trained so far is reported.
#[test]
fn a_stop_ends_every_replica_at_the_same_step() {
    let data = digits();
    // 50 epochs: far longer than the watcher takes to answer, so the stop (not the end of the
    // data) ends the run even on a fast machine (at 2 epochs a Zen 4 finished first once).
    let c = TrainConfig { log_every: 1, epochs: 50, ..cfg(32) };
    struct StopAfterTwo(usize, gpulab::stop::Stop);
    impl gpulab::train::TrainSink for StopAfterTwo {
        fn event(&mut self, ev: TrainEvent) {
            self.0 += matches!(ev, TrainEvent::Progress { replica: Some(0), .. }) as usize;
            if self.0 >= 2 {
                self.1.set();
            }
        }
        fn stop(&self) -> &gpulab::stop::Stop {
            &self.1
        }
    }
    let r = parallel::train(&data, &c, &cpu(2), &mut StopAfterTwo(0, Default::default())).unwrap();
    assert!(r.stopped_early);
    assert!(r.steps >= 2 && r.steps < 50 * (data.train_len() / 32) as u64, "{} steps", r.steps);
    assert!(r.replicas_identical);
}

/// wgpu devices on one adapter: real synchronisation, no extra compute, labelled so. The GPU's
/// matmuls round differently from the CPU's: stated tolerance 1e-3 absolute.
#[test]
fn wgpu_devices_on_one_adapter_train_what_the_cpu_trains() {
    with_gpu("wgpu_devices_on_one_adapter_train_what_the_cpu_trains", |_| {
        let data = digits();
        let c = cfg(64);
        let gpu = train(&data, &c, &dp(2, ReplicaKind::GpuDevices, 0.002, true));
        let one = train(&data, &c, &cpu(1));
        assert!(gpu.label.contains("no extra compute"), "{}", gpu.label);
        assert!(gpu.replicas_identical);
        let d = max_diff(&one.params, &gpu.params);
        assert!(d <= 1e-3, "2 wgpu devices differ from 1 CPU by {d}");
    });
}

#[test]
fn the_exercise_reports_scaling_with_provenance_timelines_and_a_verdict() {
    let ex = exercises::find("distributed").unwrap();
    let mut s = ex.settings();
    let small = ["replicas=1,2", "kind=cpu", "hidden=32", "size=as-set", "dataset=digits", "epochs=1", "batch=64"];
    s.apply(&[&small[..], &["scaling=both", "bucket_cap_mb=0.01"]].concat().into_iter().map(String::from).collect::<Vec<_>>()).unwrap();
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap();
    let t = r.table("Scaling").unwrap();
    assert_eq!(t.rows.len(), 4);
    let col = |name: &str| t.columns.iter().position(|c| c.name == name).unwrap();
    assert!(matches!(t.columns[col("speed-up")].provenance, Some(Provenance::Derived(_))));
    assert!(matches!(t.columns[col("throughput")].provenance, Some(Provenance::Measured)));
    for row in &t.rows {
        assert!(matches!(row[col("speed-up")], gpulab::report::Cell::Num(x) if x > 0.0), "{row:?}");
    }
    // Four data-parallel runs, then the pipeline's 2-stage runs at M = 1, 2, 4, 8.
    assert_eq!(r.timelines.len(), 8);
    let pipe = r.table("Pipeline parallel (CPU stages, 1 thread each)").expect("the pipeline table");
    assert_eq!(pipe.rows.len(), 5, "one stage, then M = 1, 2, 4, 8");
    let bubble = r.chart("pipeline_bubble").unwrap();
    assert_eq!(bubble.series.len(), 2);
    assert!(bubble.series.iter().all(|s| s.points.len() == 4), "{:?}", bubble.series);
    // The pipeline's sentence is evidence (a summary holds at most two sentences).
    assert!(r.verdict.evidence.iter().any(|e| e.contains("Pipeline over 2 stages")), "{:?}", r.verdict.evidence);
    let ext = r.chart("extrapolation").unwrap();
    assert!(ext.series.iter().all(|s| matches!(s.provenance, Provenance::Simulated(_)) && s.points.len() == 7));
    assert!(r.table("Beyond this machine (simulated)").is_some());
    assert!(r.verdict.summary.contains("× one replica"), "{}", r.verdict.summary);
    let declared = ex.live_charts();
    assert!(exercises::live::undeclared_ids(&declared, &sink.events).is_empty());
    assert!(sink.events.iter().any(|e| matches!(e, Event::Point { chart, .. } if chart == "replica_split")));
    // Every timeline of the report was drawn live first, under the same title, and the live
    // one of a 2-replica run has both replicas' compute lanes.
    let live: Vec<&gpulab::profile::spans::Timeline> =
        sink.events.iter().filter_map(|e| if let Event::Timeline(t) = e { Some(&**t) } else { None }).collect();
    let mut live_titles: Vec<&str> = live.iter().map(|t| t.title.as_str()).collect();
    let mut report_titles: Vec<&str> = r.timelines.iter().map(|t| t.title.as_str()).collect();
    live_titles.sort();
    report_titles.sort();
    assert_eq!(live_titles, report_titles);
    let two = live.iter().find(|t| t.lanes.iter().any(|l| l == "replica 1")).expect("a live timeline of 2 replicas");
    assert!(two.total("replica 0", "compute") > 0.0 && two.total("replica 1", "compute") > 0.0, "{:?}", two.lanes);
    // A simulated link turns the timing figures simulated, by name.
    s.apply(&["link=10gbe".into(), "scaling=strong".into()]).unwrap();
    let r = ex.run(&s, &mut CollectSink::default()).unwrap();
    let t = r.table("Scaling").unwrap();
    assert!(matches!(&t.columns[col("wall time")].provenance, Some(Provenance::Simulated(m)) if m.contains("10 GbE")));
}

/// With several rounds, every replica count runs once per round, and the tables show the run
/// whose throughput is the median of its rounds, which the report's note lists.
#[test]
fn rounds_report_each_counts_median_run() {
    let ex = exercises::find("distributed").unwrap();
    let mut s = ex.settings();
    let small = ["replicas=1,2", "kind=cpu", "hidden=32", "size=as-set", "dataset=digits", "epochs=1", "batch=64"];
    s.apply(&[&small[..], &["rounds=3", "pipeline_stages=0"]].concat().into_iter().map(String::from).collect::<Vec<_>>()).unwrap();
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap();
    let phases = sink.events.iter().filter(|e| matches!(e, Event::Phase(p) if p.contains("round"))).count();
    assert_eq!(phases, 6, "two counts × three rounds");
    let note = r.notes.iter().find(|n| n.contains("per round")).expect("a note with every round's throughput");
    let t = r.table("Scaling").unwrap();
    let col = t.columns.iter().position(|c| c.name == "throughput").unwrap();
    for (row, n) in t.rows.iter().zip([1, 2]) {
        let list =
            note.split(&format!("strong N={n}: ")).nth(1).expect("the count's rounds").split(';').next().unwrap().trim_end_matches('.');
        let mut each: Vec<f64> = list.split(", ").map(|v| v.parse().unwrap()).collect();
        assert_eq!(each.len(), 3, "{note}");
        each.sort_by(f64::total_cmp);
        let gpulab::report::Cell::Num(shown) = row[col] else { panic!("{row:?}") };
        assert_eq!(shown.round(), each[1], "N={n}: the table shows the median round ({note})");
    }
}

/// Tiny 8×8 images: enough for the CNN, small enough for every model × precision.
fn small_images() -> Dataset {
    data::load(&"shapes:res=8,n=256".parse().unwrap(), 3).unwrap()
}

fn small_cfg(model: ModelKind, precision: Precision) -> TrainConfig {
    TrainConfig {
        model,
        hidden: vec![16],
        batch: 32,
        epochs: 1,
        lr: 0.05,
        log_every: 2,
        amp: AmpConfig::new(precision),
        ..Default::default()
    }
}

/// The replicas run the one training loop, so every model and precision trains data-parallel
/// and the averaged gradients keep the replicas bit-identical: MLP and CNN, f32 and fp16/bf16
/// autocast. Overlapped small buckets (launched from inside the 16-bit backward) and, in f32,
/// ZeRO-1's sharded step give the same bits as the plain all-reduce.
#[test]
fn replicas_stay_bit_identical_for_every_model_and_precision() {
    let data = small_images();
    for model in [ModelKind::Mlp, ModelKind::Cnn] {
        for precision in Precision::ALL {
            let c = small_cfg(model, precision);
            let what = format!("{model:?} {precision:?}");
            let plain = train(&data, &c, &cpu(2));
            assert!(plain.replicas_identical, "{what}: the replicas drifted apart");
            assert!(plain.steps == (data.train_len() / 32) as u64 && plain.final_val_accuracy > 0.0, "{what}: {} steps", plain.steps);
            let untrained = train(&data, &TrainConfig { lr: 1e-9, ..c.clone() }, &cpu(2));
            assert!(max_diff(&plain.params, &untrained.params) > 1e-4, "{what}: the parameters did not move");
            if model == ModelKind::Cnn {
                assert_eq!(plain.params.len(), 2 * 2 + 2 * 2, "{what}: dense and convolution parameters");
            }
            let overlapped = train(&data, &c, &dp(2, ReplicaKind::Cpu { threads: 1 }, 0.002, true));
            assert!(overlapped.buckets >= 3 && overlapped.replicas_identical, "{what}");
            assert_eq!(bits(&overlapped.params), bits(&plain.params), "{what}: overlap changed the bits");
            if precision == Precision::F32 {
                let sharded = train(&data, &c, &DpConfig { shard_optimizer: true, ..dp(2, ReplicaKind::Cpu { threads: 1 }, 0.002, false) });
                assert_eq!(bits(&sharded.params), bits(&plain.params), "{what}: ZeRO-1 changed the bits");
            }
        }
    }
}

/// Two wgpu devices train the CNN under bf16 autocast with overlapped buckets and stay
/// bit-identical (kept small: llvmpipe runs it on the CPU).
#[test]
fn wgpu_replicas_train_the_cnn_under_autocast_in_step() {
    with_gpu("wgpu_replicas_train_the_cnn_under_autocast_in_step", |_| {
        let data = data::load(&"shapes:res=8,n=96".parse().unwrap(), 3).unwrap();
        let c = TrainConfig { batch: 16, ..small_cfg(ModelKind::Cnn, Precision::BF16) };
        let r = train(&data, &c, &dp(2, ReplicaKind::GpuDevices, 0.002, true));
        assert!(r.replicas_identical, "the wgpu replicas drifted apart");
        assert!(r.steps >= 4 && r.buckets >= 3, "{} steps, {} buckets", r.steps, r.buckets);
        let one = train(&data, &c, &cpu(1));
        let d = max_diff(&one.params, &r.params);
        // bf16 operands on both, summed in different orders: a stated 2e-2 after a few steps.
        assert!(d <= 2e-2, "2 wgpu replicas differ from 1 CPU replica by {d}");
    });
}

/// Every (step, loss) replica 0 reported, and the run.
fn train_logged(data: &Dataset, c: &TrainConfig, d: &DpConfig) -> (DpReport, Vec<(u64, u64)>) {
    let mut losses = Vec::new();
    let r = parallel::train(data, c, d, &mut |ev| {
        if let TrainEvent::Progress { replica: Some(0), step, loss, .. } = ev {
            losses.push((step, loss.to_bits()));
        }
    })
    .unwrap_or_else(|e| panic!("{d:?}: {e}"));
    (r, losses)
}

/// A data-parallel run checkpointed by replica 0 and "crashed" after step 6 resumes on every
/// replica from that checkpoint (model, optimizer state, loader position, loss scaler) and
/// ends with the uninterrupted run's bits: every later loss, the final weights, and the final
/// checkpoint's tensors. fp16 with its GradScaler and AdamW, so every kind of state matters.
#[test]
fn a_data_parallel_run_resumes_bit_exactly_from_its_checkpoint() {
    let data = small_images();
    let c = TrainConfig {
        optimizer: gpulab::nn::OptimizerKind::AdamW,
        lr: 0.01,
        log_every: 1,
        epochs: 2,
        ..small_cfg(ModelKind::Cnn, Precision::F16)
    };
    let with = |dir: &std::path::Path, every: u64, resume: bool| DpConfig {
        checkpoints: Some(DpCheckpoints {
            dir: dir.into(),
            policy: Policy { every_steps: every, every_epochs: 0, keep_last: 100, at_end: true },
            resume,
        }),
        ..cpu(2)
    };
    let (ref_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (want, want_losses) = train_logged(&data, &c, &with(ref_dir.path(), 0, false));
    assert!(want.steps >= 12 && want.replicas_identical, "{} steps", want.steps);
    train_logged(&data, &c, &with(dir.path(), 3, false));
    for p in store::list(dir.path()).unwrap() {
        if store::step_of(&p).unwrap() > 6 {
            std::fs::remove_file(p).unwrap(); // never written: the run died after step 6's
        }
    }
    let (got, got_losses) = train_logged(&data, &c, &with(dir.path(), 3, true));
    assert!(got.replicas_identical);
    assert_eq!(got_losses.first().map(|l| l.0), Some(7), "resumed at the wrong step");
    for (step, loss) in &got_losses {
        assert_eq!(want_losses[*step as usize - 1], (*step, *loss), "the loss at step {step} differs");
    }
    assert_eq!(bits(&got.params), bits(&want.params), "the final weights differ from the uninterrupted run's");
    let newest = |d: &std::path::Path| store::read(&store::list(d).unwrap()[0]).unwrap();
    let (a, b) = (newest(ref_dir.path()), newest(dir.path()));
    assert!(a.meta.grad_scaler.is_some() && a.tensors.contains_key("optimizer.exp_avg.conv0.weight"), "{:?}", a.tensors.keys());
    assert!(a.tensors == b.tensors, "the final checkpoints' weights or optimizer state differ");
}

/// What the sharded step cannot do is refused by name: mixed precision (its update runs on the
/// device with the loss scaler) and checkpoints (each replica holds 1/N of the optimizer state).
#[test]
fn zero1_refuses_autocast_and_checkpoints_by_name() {
    let data = small_images();
    let zero = DpConfig { shard_optimizer: true, ..cpu(2) };
    let e = parallel::train(&data, &small_cfg(ModelKind::Mlp, Precision::BF16), &zero, &mut gpulab::train::NullSink)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("shard_optimizer") && e.contains("precision=fp32") && e.contains("bf16"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let ck = DpConfig { checkpoints: Some(DpCheckpoints { dir: dir.path().into(), policy: Policy::default(), resume: false }), ..zero };
    let e = parallel::train(&data, &small_cfg(ModelKind::Mlp, Precision::F32), &ck, &mut gpulab::train::NullSink)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("checkpoints") && e.contains("shard_optimizer=false"), "{e}");
}

/// `gpulab run distributed --set model=cnn --set precision=bf16`: the CNN under bf16 autocast,
/// data-parallel, with its report, metadata and live charts; the pipeline part (fp32 MLP only)
/// is left out with a note that says why.
#[test]
fn the_exercise_trains_the_cnn_under_bf16() {
    let ex = exercises::find("distributed").unwrap();
    let mut s = ex.settings();
    s.apply(
        &["model=cnn", "precision=bf16", "dataset=shapes:res=8,n=256", "hidden=16", "replicas=1,2", "epochs=1", "batch=32", "rounds=1"]
            .map(String::from),
    )
    .unwrap();
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap();
    assert_eq!(r.table("Scaling").unwrap().rows.len(), 2);
    assert!(r.metadata.precision.contains("bf16"), "{}", r.metadata.precision);
    assert!(r.metadata.hyperparameters.get("architecture").is_some_and(|a| a.starts_with("CNN")), "{:?}", r.metadata.hyperparameters);
    assert!(r.verdict.evidence.iter().any(|e| e.contains("bit-identical")), "{:?}", r.verdict.evidence);
    assert!(r.notes.iter().any(|n| n.contains("Pipeline parallel was not run") && n.contains("precision=bf16")), "{:?}", r.notes);
    assert!(r.table("Pipeline parallel (CPU stages, 1 thread each)").is_none());
    assert!(exercises::live::undeclared_ids(&ex.live_charts(), &sink.events).is_empty());
    assert!(sink.events.iter().any(|e| matches!(e, Event::Point { chart, series, .. } if chart == "loss" && series == "strong N=2")));
    // ZeRO-1 with bf16 is refused before anything runs, naming the setting.
    s.apply(&["shard_optimizer=true".into()]).unwrap();
    let e = ex.validate(&s).expect_err("ZeRO-1 under bf16").to_string();
    assert!(e.contains("shard_optimizer") && e.contains("precision=fp32"), "{e}");
}
