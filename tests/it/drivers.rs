//! Every GPU exercise on the other drivers this machine reaches (issue 38): SwiftShader, a
//! second Vulkan driver (Debian's chromium ships it), and wgpu's GL backend — the other tests
//! use llvmpipe. Each exercise's quick run, moved to the GPU, runs in a child `gpulab` with the
//! driver chosen by its environment: it must finish, refusing only by name (fp16 where the
//! adapter lacks SHADER_F16, in the one sentence), and no kernel may fail to compile. The test
//! prints the driver × exercise × precision table. A driver that is missing skips, except under
//! GPULAB_REQUIRE_CHROMIUM=1 (SwiftShader) or GPULAB_REQUIRE_DISPLAY=1 (GL), as in CI.

use std::process::Command;

use gpulab::exercises;

const SWIFTSHADER_ICD: &str = "/usr/lib/chromium/vk_swiftshader_icd.json";

struct Driver {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    /// The adapter `gpulab info` must list (name or backend), proving the driver is the one used.
    shows: &'static str,
    required_by: &'static str,
}

const DRIVERS: [Driver; 2] = [
    Driver {
        name: "SwiftShader",
        env: &[("VK_ICD_FILENAMES", SWIFTSHADER_ICD)],
        shows: "SwiftShader",
        required_by: "GPULAB_REQUIRE_CHROMIUM",
    },
    Driver { name: "GL", env: &[("WGPU_BACKEND", "gl")], shows: "\"backend\": \"Gl\"", required_by: "GPULAB_REQUIRE_DISPLAY" },
];

fn gpulab(d: &Driver) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpulab"));
    c.envs(d.env.iter().copied());
    c
}

/// An exercise's quick run with every backend setting moved to the GPU; None for one that has
/// no GPU path.
fn on_gpu(e: &dyn exercises::Exercise) -> Option<Vec<String>> {
    let mut gpu = false;
    let mut pairs: Vec<String> = e
        .quick_run()
        .iter()
        .map(|&(k, v)| {
            let v = match k {
                "backend" | "backends" | "calibration_backend" => "gpu",
                "kind" => "gpu",
                _ => v,
            };
            gpu |= v == "gpu";
            format!("{k}={v}")
        })
        .collect();
    if e.id() == "platform" {
        // Exercise 10 measures on the GPU only when asked to calibrate on this machine.
        pairs.extend(["calibration=this-machine".to_string(), "calibration_backend=gpu".to_string()]);
        gpu = true;
    }
    gpu.then_some(pairs)
}

/// Ignored until it has been timed on an idle machine: on the shared 2-core machine it was
/// written on, the twenty child runs took over 25 minutes. Run it with
/// `xvfb-run -a cargo test --release --test it drivers:: -- --ignored --nocapture`.
#[test]
#[ignore = "not yet timed on an idle machine; see the comment"]
fn every_gpu_exercise_runs_or_refuses_by_name_on_swiftshader_and_gl() {
    let mut table = vec!["| driver | exercise | result |".to_string(), "|---|---|---|".to_string()];
    for d in &DRIVERS {
        let required = std::env::var(d.required_by).is_ok_and(|v| v == "1");
        let info = gpulab(d).args(["info", "--json"]).output().unwrap();
        let info = String::from_utf8_lossy(&info.stdout).into_owned();
        if !info.contains(d.shows) || (d.name == "SwiftShader" && !std::path::Path::new(SWIFTSHADER_ICD).exists()) {
            assert!(!required, "{}=1 but gpulab info shows no {} adapter:\n{info}", d.required_by, d.name);
            eprintln!("SKIPPED {}: no adapter (set {}=1 to make this a failure)", d.name, d.required_by);
            continue;
        }
        let fp16 = info.contains("fp16 needs SHADER_F16, which ");
        for e in exercises::registry() {
            let Some(pairs) = on_gpu(e.as_ref()) else { continue };
            let out_dir = tempfile::tempdir().unwrap();
            let mut c = gpulab(d);
            c.args(["run", e.id()]);
            for p in &pairs {
                c.args(["--set", p]);
            }
            let out = c.arg("--out").arg(out_dir.path()).output().unwrap();
            let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let what = format!("{} on {}", e.id(), d.name);
            assert!(out.status.success(), "{what} failed: {log}");
            assert!(!log.contains("failed to compile"), "{what}: a kernel failed to compile: {log}");
            let report = std::fs::read_to_string(out_dir.path().join("report.json")).unwrap_or_default();
            let refused = report.contains("fp16 needs SHADER_F16, which ");
            assert!(!refused || fp16, "{what}: fp16 refused, but gpulab info says the adapter has SHADER_F16");
            let result = if refused { "ran; fp16 refused: needs SHADER_F16 (bf16, fp32 ran)" } else { "ran" };
            eprintln!("| {} | {} | {result} |", d.name, e.id());
            table.push(format!("| {} | {} | {result} |", d.name, e.id()));
        }
    }
    eprintln!("{}", table.join("\n"));
}
