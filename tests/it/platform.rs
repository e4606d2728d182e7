//! Exercise 10's simulator against what queueing theory and the checkpoint literature say it
//! must do, and the exercise headless: determinism, conservation, Little's law, Erlang C, the
//! autoscaler's bounds and cooldowns, Young/Daly against a brute-force sweep, named errors.

use gpulab::exercises::{self, CollectSink, Event, Settings};
use gpulab::platform::scenario::{BatchTime, Scenario, ServiceTime, Signal, Spike};
use gpulab::platform::{self, ServingResult, training};
use gpulab::report::{Provenance, Report};

fn sim(sc: &Scenario) -> ServingResult {
    sc.validate().unwrap();
    platform::simulate(sc, gpulab::stop::Stop::never(), &mut |_| {}).unwrap()
}

/// A fixed pool of `c` workers, one request per batch, no gateway limits, no canary, no spot.
fn fixed_pool(c: u32, rps: f64, service_s: f64, hours: f64) -> Scenario {
    let mut sc = Scenario::preset("steady-day").unwrap();
    sc.duration_h = hours;
    sc.traffic.base_rps = rps;
    sc.traffic.diurnal_amplitude = 0.0;
    sc.gateway.rate_limit_rps = 0.0;
    sc.gateway.timeout_s = 0.0;
    sc.pool.curve = vec![BatchTime { batch: 1, seconds: service_s }];
    sc.pool.max_batch = 1;
    sc.pool.max_queue_delay_s = 0.0;
    sc.pool.spot_share = 0.0;
    sc.autoscaler.min_workers = c;
    sc.autoscaler.max_workers = c;
    sc.canary.enabled = false;
    sc
}

fn settings(pairs: &[&str]) -> Settings {
    let mut s = exercises::find("platform").unwrap().settings();
    s.apply(&pairs.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap();
    s
}

fn run(s: &Settings) -> (Report, Vec<Event>) {
    let mut sink = CollectSink::default();
    let r = exercises::find("platform").unwrap().run(s, &mut sink).unwrap();
    (r, sink.events)
}

const SMALL: [&str; 3] = ["duration_h=3", "sweep_points=5", "sweep_runs=5"];

/// The report's JSON without the wall-clock start time (the only field that may differ).
fn json_without_clock(r: &Report) -> String {
    let mut r = r.clone();
    r.metadata.started_at.clear();
    serde_json::to_string(&r).unwrap()
}

#[test]
fn the_same_seed_and_scenario_give_byte_identical_reports() {
    let s = settings(&[&SMALL[..], &["scenario=spot-storm"]].concat());
    let (a, _) = run(&s);
    let (b, _) = run(&s);
    assert_eq!(json_without_clock(&a), json_without_clock(&b));
    let (c, _) = run(&settings(&[&SMALL[..], &["scenario=spot-storm", "seed=7"]].concat()));
    assert_ne!(json_without_clock(&a), json_without_clock(&c), "another seed changes the run");
}

#[test]
fn every_request_is_accounted_for_at_every_sample() {
    for preset in gpulab::platform::scenario::PRESETS {
        let mut sc = Scenario::preset(preset).unwrap();
        sc.duration_h = 14.0;
        let r = sim(&sc);
        assert!(r.samples.len() > 800, "{preset}");
        for s in &r.samples {
            assert_eq!(
                s.arrived_total,
                s.served_total + s.rejected_total + s.timed_out_total + s.in_flight,
                "{preset} at {} h: {s:?}",
                s.t_h
            );
        }
        let t = &r.totals;
        assert!(t.served > 0 && t.max_alive <= sc.autoscaler.max_workers, "{preset}: {t:?}");
    }
}

#[test]
fn littles_law_holds_in_steady_state() {
    // M/D/2 with batching off, 12 simulated hours at 70% load.
    let sc = fixed_pool(2, 5.6, 0.25, 12.0);
    let r = sim(&sc);
    let t = &r.totals;
    let secs = sc.duration_h * 3600.0;
    let l = t.in_system_area / secs;
    let lambda = (t.arrived - t.rejected) as f64 / secs;
    let w = t.sojourn_sum / (t.served + t.timed_out) as f64;
    assert!(((l - lambda * w) / l).abs() < 0.02, "L = {l}, λW = {}", lambda * w);
}

/// Erlang's C formula: the probability an arrival waits in an M/M/c queue.
fn erlang_c(c: u32, a: f64) -> f64 {
    let mut term = 1.0;
    let mut sum = 1.0;
    for k in 1..c {
        term *= a / k as f64;
        sum += term;
    }
    let top = term * a / c as f64 / (1.0 - a / c as f64);
    top / (sum + top)
}

#[test]
fn an_m_m_c_pool_waits_as_erlang_c_says() {
    let (c, lambda, service) = (3, 10.0, 0.25);
    let mut sc = fixed_pool(c, lambda, service, 40.0);
    sc.pool.service_time = ServiceTime::Exponential;
    let r = sim(&sc);
    let mu = 1.0 / service;
    let wq = erlang_c(c, lambda / mu) / (c as f64 * mu - lambda);
    let t = &r.totals;
    let measured = t.queue_wait_sum / t.batched_requests as f64;
    assert!((measured / wq - 1.0).abs() < 0.05, "mean wait {measured:.4} s against Erlang C's {wq:.4} s");
}

#[test]
fn the_autoscaler_follows_a_step_within_its_cooldowns_and_never_exceeds_max() {
    // 3 requests/s, then 15 from hour 1 to 3; each worker serves 2/s.
    let mut sc = fixed_pool(2, 3.0, 0.5, 6.0);
    sc.traffic.spikes = vec![Spike { start_h: 1.0, duration_h: 2.0, multiplier: 5.0 }];
    let a = &mut sc.autoscaler;
    (a.signal, a.target, a.min_workers, a.max_workers) = (Signal::QueueDepth, 2.0, 2, 12);
    (a.interval_s, a.scale_up_cooldown_s, a.scale_down_cooldown_s) = (15.0, 60.0, 300.0);
    sc.pool.cold_start_s = 60.0;
    sc.sample_every_s = 10.0;
    let r = sim(&sc);
    for s in &r.samples {
        assert!(s.ready + s.starting <= 12, "more than max workers at {} h: {s:?}", s.t_h);
        assert_eq!(
            s.arrived_total,
            s.served_total + s.rejected_total + s.timed_out_total + s.in_flight,
            "scale-down dropped work at {} h",
            s.t_h
        );
    }
    // The step needs 8 workers at least; the controller sees it at its next look and the new
    // workers serve after one cold start.
    let deadline = 1.0 + (sc.autoscaler.interval_s + sc.pool.cold_start_s + sc.sample_every_s) / 3600.0;
    let reached = r.samples.iter().find(|s| s.t_h >= 1.0 && s.ready >= 8).map(|s| s.t_h);
    assert!(reached.is_some_and(|t| t <= deadline), "reached 8 workers at {reached:?}, deadline {deadline} h");
    // Each scale-up waits the up cooldown after the last scale-up; each scale-down waits the
    // down cooldown after any action.
    let acts = &r.scale_actions;
    for (i, b) in acts.iter().enumerate() {
        let up = b.to > b.from;
        for a in acts[..i].iter().filter(|a| !up || a.to > a.from) {
            let gap = (b.t_h - a.t_h) * 3600.0;
            let cooldown = if up { sc.autoscaler.scale_up_cooldown_s } else { sc.autoscaler.scale_down_cooldown_s };
            assert!(gap >= cooldown - 1e-6, "actions {a:?} and {b:?} are {gap} s apart");
        }
    }
    assert!(r.scale_actions.iter().any(|a| a.to < a.from), "it scaled down after the step");
    let last = r.samples.last().unwrap();
    assert!(last.ready + last.starting <= 3, "back to the two or three workers 3 requests/s need: {last:?}");
}

#[test]
fn the_young_daly_optimum_matches_a_brute_force_sweep() {
    for preset in ["steady-day", "spot-storm"] {
        let t = Scenario::preset(preset).unwrap().training;
        let points = training::sweep(&t, 3, 41, 400, gpulab::stop::Stop::never()).unwrap();
        let step = points[1].tau_h - points[0].tau_h;
        let best = training::best(&points).unwrap();
        let daly = training::daly_h(&t);
        assert!((best.tau_h - daly).abs() <= step + 1e-9, "{preset}: sweep minimum at {} h, Daly {daly} h, step {step} h", best.tau_h);
        // And the simulated means follow Daly's expected-time formula.
        for p in &points {
            assert!(
                (p.mean.wall_h / p.expected_wall_h - 1.0).abs() < 0.03,
                "{preset} at {} h: {} against {}",
                p.tau_h,
                p.mean.wall_h,
                p.expected_wall_h
            );
        }
    }
}

#[test]
fn a_hopeless_checkpoint_interval_gives_up_instead_of_hanging() {
    let mut t = Scenario::preset("spot-storm").unwrap().training;
    (t.mtbf_h, t.checkpoint_interval_h, t.work_h) = (0.01, 10_000.0, 100_000.0);
    let o = training::mean_outcome(&t, t.checkpoint_interval_h, Some(t.mtbf_h), 1, 2, gpulab::stop::Stop::never()).unwrap();
    assert!(!o.finished && o.preemptions <= training::MAX_PREEMPTIONS + 1.0, "{o:?}");
}

#[test]
fn bad_scenarios_name_the_field() {
    let base = Scenario::preset("steady-day").unwrap();
    type Edit = Box<dyn Fn(&mut Scenario)>;
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|s| s.traffic.base_rps = -1.0), "traffic.base_rps"),
        (Box::new(|s| s.autoscaler.min_workers = 20), "autoscaler.min_workers"),
        (Box::new(|s| s.pool.curve.clear()), "pool.curve"),
        (Box::new(|s| s.pool.curve[1].batch = 1), "pool.curve[1].batch"),
        (Box::new(|s| s.canary.steps = vec![0.5, 0.2]), "canary.steps"),
        (Box::new(|s| s.training.mtbf_h = f64::NAN), "training.mtbf_h"),
        (Box::new(|s| (s.autoscaler.signal, s.autoscaler.target) = (Signal::Utilisation, 4.0)), "autoscaler.target"),
        (Box::new(|s| s.traffic.spikes.push(Spike { start_h: 1.0, duration_h: 1.0, multiplier: -2.0 })), "traffic.spikes[0].multiplier"),
        (Box::new(|s| (s.traffic.base_rps, s.duration_h) = (5000.0, 744.0)), "traffic.base_rps"),
    ];
    for (edit, field) in cases {
        let mut s = base.clone();
        edit(&mut s);
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains(&format!("field {field}:")), "{field}: {err}");
    }
    for (text, word) in [("{", "EOF"), ("{\"name\": 3}", "invalid type"), ("[]", "expected struct Scenario")] {
        let err = Scenario::from_json(text).unwrap_err().to_string();
        assert!(err.contains("scenario file") && err.contains(word), "{text}: {err}");
    }
    let mut json: serde_json::Value = serde_json::from_str(&base.to_json()).unwrap();
    json["pool"]["warp"] = 1.into();
    assert!(Scenario::from_json(&json.to_string()).unwrap_err().to_string().contains("unknown field `warp`"));
    json["pool"].as_object_mut().unwrap().remove("warp");
    json["autoscaler"]["max_workers"] = 0.into();
    assert!(Scenario::from_json(&json.to_string()).unwrap_err().to_string().contains("autoscaler.max_workers"));
    // Through the exercise's settings.
    let ex = exercises::find("platform").unwrap();
    let err = ex.validate(&settings(&["scenario_file=/no/such/scenario.json"])).unwrap_err().to_string();
    assert!(err.contains("scenario_file") && err.contains("cannot read"), "{err}");
    let err = ex.validate(&settings(&["signal=utilisation", "target=4"])).unwrap_err().to_string();
    assert!(err.contains("autoscaler.target"), "{err}");
    assert!(ex.settings().apply(&["spot_share=2".into()]).unwrap_err().to_string().contains("spot_share"));
}

#[test]
fn the_exercise_reports_everything_as_simulated_and_exports_a_replayable_scenario() {
    let s = settings(&[&SMALL[..], &["scenario=bad-release", "duration_h=12"]].concat());
    let (r, events) = run(&s);
    let undeclared = exercises::live::undeclared_ids(&exercises::find("platform").unwrap().live_charts(), &events);
    assert!(undeclared.is_empty(), "{undeclared:?}");
    assert!(r.figures.iter().all(|f| matches!(f.provenance, Provenance::Simulated(_))));
    assert!(r.charts.iter().flat_map(|c| &c.series).all(|s| matches!(s.provenance, Provenance::Simulated(_))));
    for id in ["latency", "slo", "workers", "traffic", "utilisation", "queue", "dropped", "cost", "canary", "checkpoint_sweep"] {
        assert!(r.chart(id).is_some_and(|c| c.series.iter().any(|s| !s.points.is_empty())), "chart {id}");
    }
    let sweep = r.chart("checkpoint_sweep").unwrap();
    assert!(sweep.markers.iter().any(|m| m.1.starts_with("Young")) && sweep.markers.iter().any(|m| m.1 == "Daly"));
    let canary = r.table("Canary timeline").unwrap();
    assert!(canary.rows.iter().any(|row| row[1] == "rolled back".into()), "{:?}", canary.rows);
    // The canary's outcome leads the evidence (the summary answers serving and training).
    assert!(r.verdict.evidence.iter().any(|e| e.contains("rolled back automatically")), "{:?}", r.verdict.evidence);
    // The exported scenario replays the same numbers.
    let dir = tempfile::tempdir().unwrap();
    let paths = gpulab::report::write_all(&r, dir.path()).unwrap();
    let file = paths.iter().find(|p| p.ends_with("scenario.json")).expect("scenario.json written").clone();
    let (again, _) = run(&settings(&["sweep_points=5", "sweep_runs=5", &format!("scenario_file={}", file.display())]));
    assert_eq!(serde_json::to_string(&again.figures).unwrap(), serde_json::to_string(&r.figures).unwrap());
    assert_eq!(again.charts, r.charts);
    assert_eq!(again.verdict, r.verdict);
}

#[test]
fn a_good_release_is_promoted_and_stopping_keeps_what_ran() {
    let (r, _) = run(&settings(&[&SMALL[..2], &["sweep_runs=5", "duration_h=12"]].concat()));
    assert!(r.verdict.evidence.iter().any(|e| e.contains("promoted to production")), "{:?}", r.verdict.evidence);
    let mut sink = CollectSink { events: vec![], stop: gpulab::stop::Stop::set_already() };
    let r = exercises::find("platform").unwrap().run(&settings(&SMALL), &mut sink).unwrap();
    assert!(r.stopped_early);
    assert_eq!(r.chart("workers").unwrap().series[0].points.len(), 1, "one sample, then the stop");
}

/// The chapter's chain, in order: the diagram must name every stage.
const STAGES: [&str; 8] = [
    "Object storage",
    "Training data",
    "GPU training cluster",
    "Checkpoint storage",
    "Model registry",
    "GPU inference cluster",
    "API gateway",
    "Monitoring",
];

#[test]
fn the_architecture_diagram_goes_live_and_exports_well_formed_svg_naming_every_stage() {
    let (r, events) = run(&settings(&[&SMALL[..], &["scenario=bad-release", "duration_h=12"]].concat()));
    let diagrams: Vec<&gpulab::report::Diagram> =
        events.iter().filter_map(|e| if let Event::Diagram(d) = e { Some(&**d) } else { None }).collect();
    assert!(diagrams.len() > 10, "the diagram is re-emitted as the simulation advances: {}", diagrams.len());
    let last = diagrams.last().unwrap();
    let labels: Vec<&str> = last.nodes.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(labels, STAGES);
    assert_eq!(last.edges, (0..7).map(|i| (i, i + 1)).collect::<Vec<_>>(), "a chain, in the chapter's order");
    assert!(matches!(last.provenance, Provenance::Simulated(_)));
    assert!(last.nodes.iter().all(|n| !n.metrics.is_empty() && !n.settings.is_empty()), "every box has figures and settings");
    // Live: the inference box's figures change as the day goes on; the registry saw the rollback.
    let inference = |d: &gpulab::report::Diagram| d.node("inference").unwrap().metrics.clone();
    assert!(diagrams.iter().any(|d| inference(d) != inference(diagrams[0])));
    assert!(last.node("registry").unwrap().metrics.iter().any(|m| m.contains("rolled back")), "{:?}", last.node("registry"));
    // The SVG beside the report: well-formed XML, one box per stage, every stage named.
    let svg = &r.attachments.iter().find(|a| a.file_name == "architecture.svg").expect("architecture.svg attached").text;
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed: {e}\n{svg}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
    for stage in STAGES {
        assert!(texts.contains(&stage), "{stage} missing from the SVG");
    }
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("g")).count(), 8);
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("line")).count(), 7);
    let dir = tempfile::tempdir().unwrap();
    let paths = gpulab::report::write_all(&r, dir.path()).unwrap();
    assert!(paths.iter().any(|p| p.ends_with("architecture.svg")));
}

#[test]
fn monitoring_alerts_cover_four_layers_and_fire_on_the_spike() {
    let alerts = |preset: &str, max_workers: &str| {
        let (r, _) =
            run(&settings(&[&SMALL[..2], &["sweep_runs=3", &format!("scenario={preset}"), "duration_h=14", max_workers]].concat()));
        let t = r.table("Monitoring alerts").expect("an alerts table").clone();
        let layers: Vec<String> = t.rows.iter().map(|row| format!("{:?}", row[0])).collect();
        assert_eq!(t.rows.len(), 4, "{layers:?}");
        for l in ["hardware", "training", "inference", "business"] {
            assert!(layers.iter().any(|x| x.contains(l)), "{l} missing: {layers:?}");
        }
        t.rows.iter().map(|row| if let gpulab::report::Cell::Num(v) = row[1] { v } else { panic!("{:?}", row[1]) }).collect::<Vec<f64>>()
    };
    // The spike on a pool capped at two workers overflows: inference and business alerts fire.
    let (steady, capped) = (alerts("steady-day", "max_workers=0"), alerts("black-friday", "max_workers=2"));
    assert!(capped[2] > steady[2] && capped[3] > steady[3], "capped spike {capped:?} vs steady day {steady:?}");
    assert!(capped[0] > 0.0, "the capped pool runs hot: {capped:?}");
    // The spot storm's 60-minute interval against Daly's ~9 minutes: a training alert every sample.
    let storm = alerts("spot-storm", "max_workers=0");
    assert!(storm[1] > 0.0, "{storm:?}");
}

#[test]
fn object_storage_bandwidth_can_bound_training_and_old_files_still_load() {
    let mut sc = Scenario::preset("steady-day").unwrap();
    let compute = training::work_h(&sc.training);
    assert_eq!(compute, training::compute_h(&sc.training), "the preset's reads are shorter than its compute");
    sc.training.data.read_gb_per_s = 0.05; // 2000 GB × 10 epochs at 50 MB/s: 111 h of reads
    assert!((training::work_h(&sc.training) - sc.training.data.read_h()).abs() < 1e-9 && training::work_h(&sc.training) > compute);
    sc.training.data.read_gb_per_s = 0.0;
    assert!(sc.validate().unwrap_err().to_string().contains("training.data.read_gb_per_s"));
    // A scenario.json written before the data stage existed loads with the default stage.
    let mut json: serde_json::Value = serde_json::from_str(&Scenario::preset("steady-day").unwrap().to_json()).unwrap();
    json["training"].as_object_mut().unwrap().remove("data");
    assert_eq!(Scenario::from_json(&json.to_string()).unwrap(), Scenario::preset("steady-day").unwrap());
}

#[test]
fn pause_holds_the_run_step_advances_it_and_pacing_changes_no_number() {
    use gpulab::exercises::{ChannelSink, RunControl};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let s = settings(&SMALL);
    let control = Arc::new(RunControl::new(0.0));
    control.set_paused(true);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut sink = ChannelSink { tx, stop: Default::default(), wake: Box::new(|| {}), control: control.clone() };
    let s2 = s.clone();
    let worker = std::thread::spawn(move || exercises::find("platform").unwrap().run(&s2, &mut sink).unwrap());
    let mut diagrams = 0;
    let wait_for = |want: usize, diagrams: &mut usize| {
        let t0 = Instant::now();
        while *diagrams < want && t0.elapsed() < Duration::from_secs(60) {
            if let Ok(Event::Diagram(_)) = rx.recv_timeout(Duration::from_millis(50)) {
                *diagrams += 1;
            }
        }
        // Whatever else is queued now arrives too; a held run sends no further diagram.
        std::thread::sleep(Duration::from_millis(300));
        while let Ok(ev) = rx.try_recv() {
            *diagrams += usize::from(matches!(ev, Event::Diagram(_)));
        }
    };
    wait_for(1, &mut diagrams);
    assert_eq!(diagrams, 1, "paused after the first live point");
    assert!(!worker.is_finished());
    control.step();
    wait_for(2, &mut diagrams);
    assert_eq!(diagrams, 2, "one step, one more live point");
    control.set_paused(false);
    let paced = worker.join().unwrap();
    let (flat, _) = run(&s);
    assert_eq!(json_without_clock(&paced), json_without_clock(&flat));
}

#[test]
fn traffic_replays_from_a_csv_and_bad_rows_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("traffic.csv");
    // 5 requests/s for an hour, then a ramp to 40 and back.
    std::fs::write(&csv, "hour,rps\n0,5\n1,5\n1.5,40\n2,5\n").unwrap();
    let s = settings(&[&SMALL[..], &["scenario=steady-day", &format!("traffic_csv={}", csv.display())]].concat());
    let (r, _) = run(&s);
    let offered = &r.chart("traffic").unwrap().series[0].points;
    let at = |h: f64| offered.iter().find(|p| (p[0] - h).abs() < 1e-9).map(|p| p[1]).unwrap();
    assert_eq!((at(0.5), at(1.5), at(1.75), at(2.5)), (5.0, 40.0, 22.5, 5.0), "the replayed rate, linear between rows");
    // The scenario written beside the report carries the replay: it runs again without the CSV.
    let json = &r.attachments.iter().find(|a| a.file_name == "scenario.json").unwrap().text;
    let file = dir.path().join("scenario.json");
    std::fs::write(&file, json).unwrap();
    std::fs::remove_file(&csv).unwrap();
    let (again, _) = run(&settings(&["sweep_points=5", "sweep_runs=5", &format!("scenario_file={}", file.display())]));
    assert_eq!((again.figures, again.charts), (r.figures.clone(), r.charts.clone()));
    // Unreadable and malformed files: the setting, the line and the field.
    let ex = exercises::find("platform").unwrap();
    let err = ex.validate(&settings(&[&format!("traffic_csv={}", csv.display())])).unwrap_err().to_string();
    assert!(err.contains("traffic_csv") && err.contains("cannot read"), "{err}");
    std::fs::write(&csv, "hour,rps\n0,5\n1,lots\n").unwrap();
    let err = ex.validate(&settings(&[&format!("traffic_csv={}", csv.display())])).unwrap_err().to_string();
    assert!(err.contains("traffic_csv") && err.contains("line 3") && err.contains("field rps"), "{err}");
}

#[test]
fn calibration_measures_this_machine_labels_it_and_the_scenario_replays_it_exactly() {
    let s = settings(&[&SMALL[..], &["scenario=steady-day", "calibration=this-machine", "calibration_backend=cpu"]].concat());
    let (r, events) = run(&s);
    let json = r.attachments.iter().find(|a| a.file_name == "scenario.json").unwrap().text.clone();
    let sc = Scenario::from_json(&json).unwrap();
    let measured = "measured on this machine";
    assert!(sc.pool.curve_source.starts_with(measured), "{}", sc.pool.curve_source);
    assert!(sc.training.checkpoint_write_source.starts_with(measured), "{}", sc.training.checkpoint_write_source);
    // f16 training may be unavailable on a backend: then the preset stays, saying why.
    let p = &sc.training.precision_speedup_source;
    assert!(p.starts_with(measured) || p.starts_with("preset (not measurable"), "{p}");
    // Batch sizes 1, 2, 4, 8 and the preset's max batch 16, each a positive time.
    assert_eq!(sc.pool.curve.iter().map(|c| c.batch).collect::<Vec<_>>(), vec![1, 2, 4, 8, 16]);
    assert!(sc.pool.curve.iter().all(|c| c.seconds > 0.0 && c.seconds < 60.0), "{:?}", sc.pool.curve);
    assert!(sc.training.checkpoint_write_s > 0.0);
    assert!(events.iter().any(|e| matches!(e, Event::Log(m) if m.starts_with("calibration: checkpoint write"))));
    // The measured inputs are figures labelled measured, and the inputs table names their source.
    let labelled: Vec<_> = r.figures.iter().filter(|f| f.provenance == Provenance::Measured).map(|f| f.label.as_str()).collect();
    assert!(
        labelled.contains(&"calibration: batch time at batch 1") && labelled.contains(&"calibration: checkpoint write time"),
        "{labelled:?}"
    );
    let inputs = r.table("Simulation inputs and their sources").unwrap();
    assert!(inputs.rows[0][2] == sc.pool.curve_source.as_str().into(), "{:?}", inputs.rows);
    // Replaying scenario.json measures nothing and gives the same simulation, byte for byte.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scenario.json");
    std::fs::write(&file, &json).unwrap();
    let (again, events) = run(&settings(&["sweep_points=5", "sweep_runs=5", &format!("scenario_file={}", file.display())]));
    assert!(!events.iter().any(|e| matches!(e, Event::Phase(p) if p.starts_with("calibration"))));
    assert_eq!(again.attachments.iter().find(|a| a.file_name == "scenario.json").unwrap().text, json);
    let simulated = |r: &Report| r.figures.iter().filter(|f| matches!(f.provenance, Provenance::Simulated(_))).cloned().collect::<Vec<_>>();
    assert_eq!(simulated(&again), simulated(&r));
    assert_eq!((&again.charts, &again.tables, &again.verdict), (&r.charts, &r.tables, &r.verdict));
}

#[test]
fn presets_stay_presets_and_bad_calibration_settings_are_named() {
    // The default measures nothing: the preset scenario, unchanged, with no source fields added.
    let (r, events) = run(&settings(&SMALL));
    let json = &r.attachments.iter().find(|a| a.file_name == "scenario.json").unwrap().text;
    let mut preset = Scenario::preset("steady-day").unwrap();
    preset.duration_h = 3.0;
    assert_eq!(json, &preset.to_json());
    assert!(!json.contains("precision_speedup_source") && !json.contains("checkpoint_write_source"));
    assert!(!events.iter().any(|e| matches!(e, Event::Phase(p) if p.starts_with("calibration"))));
    let inputs = r.table("Simulation inputs and their sources").unwrap();
    assert!(inputs.rows.iter().all(|row| matches!(&row[2], gpulab::report::Cell::Text(t) if t.starts_with("preset"))), "{:?}", inputs.rows);
    assert!(r.figures.iter().all(|f| matches!(f.provenance, Provenance::Simulated(_))));
    let mut s = exercises::find("platform").unwrap().settings();
    let err = s.apply(&["calibration=sometimes".to_string()]).unwrap_err().to_string();
    assert!(err.contains("calibration"), "{err}");
    let err = exercises::find("platform").unwrap().validate(&settings(&["calibration_backend=cpu,cpu"])).unwrap_err().to_string();
    assert!(err.contains("calibration_backend"), "{err}");
}

/// Runs `f` on its own thread; panics if it has not returned in `secs` seconds.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} did not end in {secs} s"))
}

/// A free checkpoint (`checkpoint_write_s: 0`) made Daly's interval 0 and the sweep loop for
/// ever; every value that cannot make progress is refused, naming the field and its range.
#[test]
fn values_that_cannot_make_progress_are_refused_by_name() {
    let base = Scenario::preset("steady-day").unwrap();
    type Edit = Box<dyn Fn(&mut Scenario)>;
    let cases: Vec<(Edit, &str, &str)> = vec![
        (Box::new(|s| s.training.checkpoint_write_s = 0.0), "training.checkpoint_write_s", "0.000001..=86400"),
        (Box::new(|s| s.training.checkpoint_write_s = -1.0), "training.checkpoint_write_s", "outside"),
        (Box::new(|s| s.training.checkpoint_write_s = f64::NAN), "training.checkpoint_write_s", "outside"),
        (Box::new(|s| (s.training.checkpoint_write_s, s.training.mtbf_h) = (1e-6, 0.01)), "training.checkpoint_write_s", "Daly"),
        (
            Box::new(|s| (s.training.checkpoint_interval_h, s.training.work_h) = (0.001, 100_000.0)),
            "training.checkpoint_interval_h",
            "intervals",
        ),
        (Box::new(|s| s.sample_every_s = 0.0), "sample_every_s", "outside"),
        (Box::new(|s| s.autoscaler.interval_s = 0.0), "autoscaler.interval_s", "outside"),
        (Box::new(|s| s.canary.window_s = f64::INFINITY), "canary.window_s", "outside"),
        (Box::new(|s| s.pool.curve[0].seconds = 0.0), "pool.curve[0].seconds", "outside"),
        (Box::new(|s| s.training.data.read_gb_per_s = 0.0), "training.data.read_gb_per_s", "outside"),
    ];
    for (edit, field, words) in cases {
        let mut s = base.clone();
        edit(&mut s);
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains(&format!("field {field}:")) && err.contains(words), "{field}: {err}");
    }
    // Through a scenario file, as the issue found it: refused by validation, not run.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("free-checkpoints.json");
    let mut sc = base.clone();
    sc.training.checkpoint_write_s = 0.0;
    std::fs::write(&file, sc.to_json()).unwrap();
    let s = settings(&[&SMALL[..], &[&format!("scenario_file={}", file.display())]].concat());
    let err = within(60, "exercise 10 with checkpoint_write_s 0", move || {
        exercises::find("platform").unwrap().run(&s, &mut CollectSink::default()).map(drop).unwrap_err().to_string()
    });
    assert!(err.contains("training.checkpoint_write_s"), "{err}");
}

/// The simulation's own loops refuse an interval that cannot end instead of spinning.
#[test]
fn an_interval_that_cannot_end_is_an_error_not_a_hang() {
    let mut t = Scenario::preset("steady-day").unwrap().training;
    t.checkpoint_write_s = 0.0;
    for tau in [0.0, -1.0, f64::NAN, 1e-12] {
        let t = t.clone();
        let err = within(30, "run_job", move || {
            use rand::SeedableRng;
            training::run_job(&t, tau, Some(t.mtbf_h), &mut rand_chacha::ChaCha8Rng::seed_from_u64(1)).unwrap_err().to_string()
        });
        assert!(err.contains("checkpoint interval") && err.contains("checkpoint_interval_h"), "{tau}: {err}");
    }
    let err = within(30, "the sweep", move || training::sweep(&t, 1, 5, 2, gpulab::stop::Stop::never()).unwrap_err().to_string());
    assert!(err.contains("checkpoint_write_s"), "{err}");
}

/// Stop during a long serving simulation (a hundred million requests between two samples)
/// ends the exercise within a second or so: the simulation asks between samples too.
#[test]
fn stop_during_a_long_simulation_returns_promptly() {
    let mut sc = Scenario::preset("steady-day").unwrap();
    (sc.duration_h, sc.sample_every_s, sc.traffic.base_rps, sc.traffic.diurnal_amplitude) = (2.7, 86_400.0, 10_000.0, 0.0);
    sc.validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.json");
    std::fs::write(&file, sc.to_json()).unwrap();
    let s = settings(&["sweep_points=5", "sweep_runs=5", &format!("scenario_file={}", file.display())]);
    let stop = gpulab::stop::Stop::new();
    let flag = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        flag.set();
    });
    let t0 = std::time::Instant::now();
    let r = within(60, "a stopped simulation", move || {
        exercises::find("platform").unwrap().run(&s, &mut CollectSink { events: vec![], stop }).unwrap()
    });
    assert!(r.stopped_early);
    assert!(t0.elapsed() < std::time::Duration::from_secs(15), "Stop took {:?}", t0.elapsed());
}

/// Late in a long run a request's deadline `arrived + max_queue_delay_s` minus `arrived` is
/// no longer exactly the delay (the sum is rounded to the clock's magnitude): the batch timer
/// must still let the batch go when it fires, not re-arm itself at the same instant for ever.
#[test]
fn a_batch_timer_late_in_a_long_run_still_sends_its_batch() {
    let mut sc = Scenario::preset("steady-day").unwrap();
    (sc.duration_h, sc.sample_every_s, sc.traffic.base_rps, sc.canary.enabled) = (744.0, 3600.0, 0.2, false);
    (sc.pool.max_queue_delay_s, sc.pool.spot_share) = (0.03, 0.0);
    sc.validate().unwrap();
    let r = within(120, "a month of light traffic", move || {
        platform::simulate(&sc, gpulab::stop::Stop::never(), &mut |_| {}).map_err(|e| e.to_string())
    });
    let r = r.unwrap();
    assert!(r.totals.served > 400_000 && !r.stopped_early, "{:?}", r.totals);
}

#[test]
fn a_request_rate_autoscaler_sizes_the_pool_to_arrivals_per_worker() {
    // 3 requests/s, then 15 from hour 1 to 3; the target is 1.5 requests/s per worker, so the
    // pool should be 2 workers before the step and 10 during it.
    let mut sc = fixed_pool(2, 3.0, 0.5, 4.0);
    sc.traffic.spikes = vec![Spike { start_h: 1.0, duration_h: 2.0, multiplier: 5.0 }];
    let a = &mut sc.autoscaler;
    (a.signal, a.target, a.min_workers, a.max_workers) = (Signal::RequestRate, 1.5, 1, 20);
    (a.interval_s, a.scale_up_cooldown_s, a.scale_down_cooldown_s) = (15.0, 60.0, 300.0);
    sc.pool.cold_start_s = 60.0;
    sc.sample_every_s = 10.0;
    let r = sim(&sc);
    let workers = |from: f64, to: f64| -> Vec<u32> {
        r.samples.iter().filter(|s| s.t_h > from && s.t_h < to).map(|s| s.ready + s.starting).collect()
    };
    let mean = |w: &[u32]| w.iter().sum::<u32>() as f64 / w.len().max(1) as f64;
    let before = workers(0.5, 1.0);
    assert!((1.5..=3.0).contains(&mean(&before)) && before.iter().all(|&n| n <= 4), "3 requests/s want 2 workers: {before:?}");
    let during = workers(1.5, 3.0);
    assert!(
        (9.0..=12.5).contains(&mean(&during)) && during.iter().all(|&n| (8..=14).contains(&n)),
        "15 requests/s want 10 workers: {during:?}"
    );
    // The signal each scale-up saw is the arrivals per worker over its look (those whose whole
    // 15 s window lies inside the step).
    let ups: Vec<_> = r.scale_actions.iter().filter(|a| a.t_h >= 1.0 + 15.0 / 3600.0 && a.t_h < 3.0 && a.to > a.from).collect();
    assert!(!ups.is_empty(), "it scaled up for the step: {:?}", r.scale_actions);
    for up in ups {
        let per_worker = 15.0 / up.from as f64;
        assert!((up.signal - per_worker).abs() < 0.3 * per_worker, "{up:?} against {per_worker} requests/s per worker");
    }
    assert!(r.scale_actions.iter().any(|a| a.t_h > 3.0 && a.to < a.from), "it scaled down after the step");
}

#[test]
fn an_evaluation_gate_refuses_a_weak_candidate_before_any_traffic_reaches_it() {
    let weak = Scenario::preset("weak-candidate").unwrap();
    let r = sim(&weak);
    assert_eq!(r.canary.len(), 1, "{:?}", r.canary);
    assert_eq!(r.canary[0].action, platform::serving::canary::REFUSED);
    assert!(r.eval_accuracy.is_some_and(|a| a < weak.canary.quality_gate.min_accuracy), "{:?}", r.eval_accuracy);
    assert!(r.samples.iter().all(|s| s.canary_share == 0.0), "no traffic reached the refused candidate");
    // The same scenario with a candidate above the gate passes it, then rolls out.
    let mut good = weak.clone();
    good.canary.quality_gate.v2_accuracy = 0.96;
    let r = sim(&good);
    let actions: Vec<&str> = r.canary.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions[..2], [platform::serving::canary::PASSED, "canary started"], "{actions:?}");
    assert!(r.canary[0].reason.contains("measured accuracy") && r.canary[0].reason.contains("5000 held-out samples"), "{:?}", r.canary[0]);
    // A scenario file without a gate (older files) loads with the gate off.
    let mut json: serde_json::Value = serde_json::from_str(&weak.to_json()).unwrap();
    json["canary"].as_object_mut().unwrap().remove("quality_gate");
    let old = Scenario::from_json(&json.to_string()).unwrap();
    assert!(!old.canary.quality_gate.enabled);
    assert!(sim(&old).canary.iter().all(|e| !e.action.contains("evaluation gate")));
    // The exercise shows the refusal in its timeline and verdict.
    let (report, _) = run(&settings(&[&SMALL[..], &["scenario=weak-candidate", "gpu_types=none", "duration_h=10"]].concat()));
    let canary = report.table("Canary timeline").unwrap();
    assert!(canary.rows.iter().any(|row| row[1] == platform::serving::canary::REFUSED.into()), "{:?}", canary.rows);
    assert!(report.verdict.evidence.iter().any(|e| e.contains("refused by the evaluation gate")), "{:?}", report.verdict.evidence);
}

#[test]
fn gpu_types_are_compared_on_the_same_scenario_and_the_cheapest_meeting_the_slo_is_named() {
    let (r, _) = run(&settings(&[&SMALL[..], &["gpu_types=t4,a10g,h100"]].concat()));
    let t = r.tables.iter().find(|t| t.title.starts_with("GPU types")).expect("a comparison table");
    assert!(t.title.contains("assumptions") && t.title.contains(gpulab::exercises::cost::AS_OF), "{}", t.title);
    assert!(t.columns.iter().filter_map(|c| c.provenance.as_ref()).all(|p| matches!(p, Provenance::Simulated(_))));
    let names: Vec<String> = t.rows.iter().map(|row| row[0].format(&t.columns[0])).collect();
    assert_eq!(names, ["t4", "a10g", "h100"]);
    let num = |row: &Vec<gpulab::report::Cell>, i: usize| match row[i] {
        gpulab::report::Cell::Num(v) => v,
        _ => panic!("{row:?}"),
    };
    // The faster type needs fewer workers at its peak.
    assert!(num(&t.rows[2], 5) <= num(&t.rows[0], 5), "{:?}", t.rows);
    let meeting = t.rows.iter().filter(|row| row[8] == "yes".into());
    match meeting.min_by(|a, b| num(a, 6).total_cmp(&num(b, 6))) {
        Some(best) => {
            let name = best[0].format(&t.columns[0]);
            let said = format!("{name} was the cheapest that met the SLO");
            assert!(r.verdict.evidence.iter().any(|e| e.contains(&said)), "{:?}", r.verdict.evidence);
        }
        None => assert!(
            r.verdict.evidence.iter().any(|e| e.contains("None of the 3 GPU types compared met the SLO")),
            "{:?}",
            r.verdict.evidence
        ),
    }
    // none: no comparison; an unknown type is refused by name.
    let (r, _) = run(&settings(&[&SMALL[..], &["gpu_types=none"]].concat()));
    assert!(r.tables.iter().all(|t| !t.title.starts_with("GPU types")));
    let e = exercises::find("platform").unwrap().validate(&settings(&["gpu_types=t4,v100"])).unwrap_err().to_string();
    assert!(e.contains("v100") && e.contains("h100"), "{e}");
}
