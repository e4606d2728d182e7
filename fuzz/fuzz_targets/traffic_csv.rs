//! Exercise 10's traffic CSV (`platform::traffic_csv::parse`): any bytes give points or an
//! error, never a panic. Accepted points start at hour 0, increase, hold rates in 0..=10000,
//! and written back as CSV parse to the same points.
#![no_main]

use gpulab_systems::platform::traffic_csv::{MAX_ROWS, parse, rate_at};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(points) = parse(bytes) else { return };
    assert!(!points.is_empty() && points.len() <= MAX_ROWS);
    assert_eq!(points[0].hour, 0.0);
    assert!(points.windows(2).all(|w| w[0].hour < w[1].hour), "hours do not increase");
    assert!(points.iter().all(|p| p.hour.is_finite() && (0.0..=10_000.0).contains(&p.rps)));
    let last = points[points.len() - 1];
    for h in [0.0, last.hour / 2.0, last.hour, last.hour + 1.0] {
        let r = rate_at(&points, h);
        assert!(r.is_finite() && (0.0..=10_000.0).contains(&r), "rate {r} at hour {h}");
    }
    let mut csv = String::from("hour,rps\n");
    for p in &points {
        csv.push_str(&format!("{},{}\n", p.hour, p.rps));
    }
    assert_eq!(parse(csv).expect("written points parse"), points);
});
