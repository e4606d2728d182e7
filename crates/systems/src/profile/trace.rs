//! Chrome/Perfetto trace export: one "X" (complete) event per span, one thread per lane with a
//! thread_name metadata event, times in microseconds. Opens in ui.perfetto.dev and
//! chrome://tracing.

use serde_json::{Value, json};

use gpulab_core::spans::Timeline;

pub fn to_json(t: &Timeline) -> Value {
    let mut events = vec![json!({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": format!("gpulab: {}", t.title)}})];
    for (i, lane) in t.lanes.iter().enumerate() {
        events.push(json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": i + 1, "args": {"name": lane}}));
        events.push(json!({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": i + 1, "args": {"sort_index": i}}));
    }
    for s in &t.spans {
        let Some(tid) = t.lanes.iter().position(|l| *l == s.lane) else { continue };
        let mut args = serde_json::Map::new();
        if let Some(f) = s.flops {
            args.insert("flops (estimate)".into(), json!(f));
        }
        if let Some(b) = s.bytes {
            args.insert("bytes (estimate)".into(), json!(b));
        }
        events.push(json!({
            "name": s.name, "cat": if s.lane == gpulab_core::spans::GPU { "gpu" } else { "cpu" },
            "ph": "X", "pid": 1, "tid": tid + 1,
            "ts": s.start_s * 1e6, "dur": s.duration() * 1e6, "args": args,
        }));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"gpu_lane": t.gpu_note}})
}

/// A file name for the trace of `t`, e.g. "trace-after.json".
pub fn file_name(t: &Timeline) -> String {
    let slug: String = t.title.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let slug = slug.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-");
    if slug.is_empty() { "trace.json".into() } else { format!("trace-{slug}.json") }
}
