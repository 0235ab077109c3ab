//! The SVG charts `unicron evaluate` writes.

use std::fmt::Write;

use super::tables::baselines;
use super::{Evaluation, policies};

const COLORS: [&str; 6] = [
    "#1b6ac9", "#c9341b", "#2a9d3a", "#8a4fc9", "#c98a1b", "#1bb5c9",
];

/// An SVG frame with a title, a y axis of 0-`y_max` and an x label.
fn frame(title: &str, x_label: &str, y_ticks: &[(f64, String)], out: &mut String) {
    let (w, h, pad) = (720.0, 360.0, 56.0);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r##"<rect width="{w}" height="{h}" fill="#fff"/>"##);
    for (y, label) in y_ticks {
        let _ = writeln!(
            out,
            r##"<line x1="{pad}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{label}</text>"##,
            w - pad,
            y + 4.0,
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}">{x_label}</text><text x="{pad}" y="20">{title}</text>"#,
        w / 2.0 - 60.0,
        h - 12.0,
    );
}

/// An SVG line chart of the accumulated useful work over time, one line
/// per policy, on the first seed: weighted FLOPs done so far as a share of
/// what the no-failure ideal does in the whole run (the dashed diagonal).
pub fn svg(e: &Evaluation) -> String {
    let (w, h, pad) = (720.0, 360.0, 56.0);
    let hours = e.scenario.hours.max(1.0);
    let x = |t: f64| pad + (w - 2.0 * pad) * t / hours;
    let y = |f: f64| h - pad - (h - 2.0 * pad) * f.clamp(0.0, 1.0);
    let ticks: Vec<(f64, String)> = [0.0, 0.25, 0.5, 0.75, 1.0]
        .iter()
        .map(|t| (y(*t), format!("{:.0}%", t * 100.0)))
        .collect();
    let mut out = String::new();
    frame(
        &format!(
            "useful work done so far, share of the ideal's whole run, seed 1 — scenario {}",
            e.scenario.name
        ),
        "simulated hours",
        &ticks,
        &mut out,
    );
    // At most about 14 labels: days, weeks or 30-day months.
    let step = [6.0, 24.0, 168.0, 720.0]
        .into_iter()
        .find(|step| hours / step <= 14.0)
        .unwrap_or(720.0);
    let mut t = 0.0;
    while t <= hours {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}">{t}</text>"#,
            x(t) - 6.0,
            h - pad + 16.0
        );
        t += step;
    }
    let _ = writeln!(
        out,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}">no-failure ideal</text>"##,
        x(0.0),
        y(0.0),
        x(hours),
        y(1.0),
        x(hours) - 110.0,
        y(1.0) - 6.0
    );
    let list = policies(&e.scenario);
    for (i, policy) in list.iter().enumerate() {
        let Some(run) = e.policies.get(policy.name).and_then(|r| r.runs.first()) else {
            continue;
        };
        let line: Vec<String> = std::iter::once((0.0, 0.0))
            .chain(run.timeline.iter().map(|(t, f)| (*t, f * t / hours)))
            .map(|(t, f)| format!("{:.1},{:.1}", x(t), y(f)))
            .collect();
        let color = COLORS[i % COLORS.len()];
        let final_share = run.waf_fraction * 100.0;
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{color}">{} ({final_share:.1}%)</text>"#,
            line.join(" "),
            pad + 8.0,
            pad + 16.0 * i as f64,
            policy.name
        );
    }
    out.push_str("</svg>\n");
    out
}

/// An SVG chart of unicron's WAF over each baseline's against the failure
/// rate, one line per baseline, from evaluations of one setting at several
/// rates (mean over seeds, the range over seeds as a bar).
pub fn ratio_svg(evaluations: &[Evaluation]) -> String {
    let (w, h, pad) = (720.0, 360.0, 56.0);
    let mut rates: Vec<f64> = evaluations.iter().map(|e| e.scenario.rate).collect();
    rates.sort_by(f64::total_cmp);
    let (lo, hi) = (
        rates.first().copied().unwrap_or(1.0).log2(),
        rates.last().copied().unwrap_or(1.0).log2(),
    );
    let x = |r: f64| pad + (w - 2.0 * pad) * (r.log2() - lo) / (hi - lo).max(1e-9);
    let top = evaluations
        .iter()
        .filter_map(|e| e.policies.get("unicron"))
        .flat_map(|u| u.ratio_range.values().map(|(_, hi)| *hi))
        .fold(1.0_f64, f64::max)
        .ceil()
        .max(2.0);
    let y = |v: f64| h - pad - (h - 2.0 * pad) * (v / top).clamp(0.0, 1.0);
    let ticks: Vec<(f64, String)> = (0..=(top * 2.0) as u32)
        .map(|k| f64::from(k) / 2.0)
        .map(|v| (y(v), format!("{v:.1}x")))
        .collect();
    let mut out = String::new();
    frame(
        "unicron's WAF over each baseline's against the failure rate",
        "failure rate, multiple of the paper setting's (log scale)",
        &ticks,
        &mut out,
    );
    for r in &rates {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}">{r}x</text>"#,
            x(*r) - 8.0,
            h - pad + 16.0
        );
    }
    let Some(first) = evaluations.first() else {
        out.push_str("</svg>\n");
        return out;
    };
    for (i, name) in baselines(first).iter().enumerate() {
        let mut points = Vec::new();
        for e in evaluations {
            let Some(u) = e.policies.get("unicron") else {
                continue;
            };
            if let (Some(v), Some((a, b))) = (u.ratio.get(*name), u.ratio_range.get(*name)) {
                points.push((e.scenario.rate, *v, *a, *b));
            }
        }
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = COLORS[(i + 1) % COLORS.len()];
        let line: Vec<String> = points
            .iter()
            .map(|(r, v, _, _)| format!("{:.1},{:.1}", x(*r), y(*v)))
            .collect();
        for (r, _, a, b) in &points {
            let _ = writeln!(
                out,
                r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="{color}"/>"#,
                x(*r),
                y(*a),
                y(*b)
            );
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{color}">vs {name}</text>"#,
            line.join(" "),
            pad + 8.0,
            pad + 16.0 * i as f64 + 16.0,
        );
    }
    let one = y(1.0);
    let _ = writeln!(
        out,
        r##"<line x1="{pad}" x2="{}" y1="{one:.1}" y2="{one:.1}" stroke="#333" stroke-dasharray="4 3"/>"##,
        w - pad
    );
    out.push_str("</svg>\n");
    out
}
