//! Fuzzing the pure inputs of `unicron-core` (docs/fuzzing.md): the detector's log
//! classifier and `unicron plan`'s request.
//!
//! The classifier never panics on any line (very long, lossily decoded from
//! invalid UTF-8, dense with keywords), classifies a line the same whatever
//! it classified before, and looks at no more than `MAX_LINE_BYTES` of it;
//! user rule files either compile or fail with one line naming the rule and
//! field. A plan request is refused with the field named, or solved
//! within a memory bound set by the DP's size, with an allocation that
//! respects every constraint.
//!
//! `PROPTEST_CASES=200000 cargo test --release -p unicron-core --test
//! fuzz_inputs` is the long run (docs/fuzzing.md).

// The counting allocator below implements `GlobalAlloc`, which is unsafe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::LazyLock;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use unicron_core::allocation::{
    MAX_PLAN_CELLS, MAX_PLAN_JOBS, MAX_PLAN_POINTS, PlanRequest, PlanRequestJob,
};
use unicron_core::detector::rules::{
    BUILTIN_RULES, Classified, LogRules, MAX_LINE_BYTES, RulesFile, Verdict,
};

// ---------------------------------------------------------------------------
// The peak of live bytes on this thread while a closure runs.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The result of `f` and the most bytes it had live at once.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    (out, (PEAK.with(Cell::get) - start).max(0) as usize)
}

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// The log classifier.

static RULES: LazyLock<LogRules> = LazyLock::new(LogRules::builtin);

/// Every keyword of the built-in rules, and pieces of the lines they match.
static FRAGMENTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let file = RulesFile::parse(BUILTIN_RULES).unwrap();
    let mut out: Vec<String> = file
        .rules
        .iter()
        .flat_map(|r| r.keywords.iter().cloned())
        .collect();
    out.extend(
        [
            "NVRM: Xid (PCI:0000:3b:00): ",
            "79",
            "48",
            ", pid=1234",
            "[Rank 3] ",
            "rank 12",
            "GPU 5",
            "node-7",
            "error",
            "timeout",
            "RuntimeError: ",
            "CUDA error: ",
            "ran for 1800000 milliseconds",
            "ecc errors: 0",
            "(",
            ")",
            ":",
            "ü",
            "😀",
            "\u{0}",
            "\n",
            "\t",
        ]
        .map(str::to_string),
    );
    out
});

/// Lines the built-in rules classify as failures, the match at the end.
const FAILING: &[&str] = &[
    "kernel: NVRM: Xid (PCI:0000:3b:00): 79",
    "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 1800086 milliseconds before timing out",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "kernel: mlx5_core 0000:3b:00.0 ens1f0np0: Link down",
    "torch.OutOfMemoryError: CUDA out of memory",
];

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(FRAGMENTS.clone()),
        1 => ".{0,12}",
        1 => "[0-9]{1,12}",
    ]
}

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        // Keywords and the text around them, in any order and case.
        4 => (proptest::collection::vec(fragment(), 0..12), any::<bool>()).prop_map(
            |(parts, upper)| {
                let line = parts.join(" ");
                if upper { line.to_uppercase() } else { line }
            }
        ),
        // Invalid UTF-8, decoded lossily as the formats do.
        2 => proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        // Dense with matches, and far beyond the truncation point.
        1 => (fragment(), 100usize..3000).prop_map(|(f, n)| f.repeat(n)),
    ]
}

/// A failing line ending just before, at or after the truncation point, a
/// multi-byte character across it or not. (Non-ASCII text makes the
/// regexes slow in a debug build: about 0.4 s for such a line.)
fn line_at_the_limit() -> impl Strategy<Value = String> {
    (
        0usize..16,
        prop_oneof![5 => Just(""), 1 => Just("é"), 1 => Just("€"), 1 => Just("😀")],
        proptest::sample::select(FAILING.to_vec()),
    )
        .prop_map(|(shift, c, failing)| {
            let pad = (MAX_LINE_BYTES + shift).saturating_sub(8 + failing.len() + c.len());
            format!("{}{c}{failing}", "a".repeat(pad))
        })
}

fn verdict_agrees(rules: &LogRules, line: &str, classified: &Option<Classified>) -> bool {
    match (rules.verdict(line), classified) {
        (Verdict::Benign | Verdict::Unnamed, None) => true,
        (Verdict::Failure { kind, severity, .. }, Some(c)) => {
            kind == c.kind && severity == c.severity && c.score_permille.is_none()
        }
        (
            Verdict::Learned {
                kind,
                severity,
                score_permille,
            },
            Some(c),
        ) => kind == c.kind && severity == c.severity && c.score_permille == Some(score_permille),
        _ => false,
    }
}

/// The line the rules look at: its first `MAX_LINE_BYTES` bytes, cut at a
/// character boundary.
fn truncated(line: &str) -> &str {
    let mut end = line.len().min(MAX_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[test]
fn the_failing_lines_fail_and_are_ignored_past_the_limit() {
    for line in FAILING {
        assert!(RULES.classify(line).is_some(), "{line}");
        let late = format!("{}{line}", "a".repeat(MAX_LINE_BYTES));
        assert_eq!(RULES.classify(&late), None, "{line}");
    }
}

proptest! {
    #![proptest_config(cases(1024))]

    /// No line panics the classifier; `verdict` (the hot path) and
    /// `classify` agree; only the first `MAX_LINE_BYTES` count.
    #[test]
    fn any_line_classifies(line in line()) {
        let classified = RULES.classify(&line);
        prop_assert!(verdict_agrees(&RULES, &line, &classified), "{line:?}");
        prop_assert_eq!(&RULES.classify(truncated(&line)), &classified);
        if let Some(c) = &classified {
            prop_assert!(!c.rule.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(cases(48))]

    /// Only the first `MAX_LINE_BYTES` bytes of a line count.
    #[test]
    fn lines_at_the_truncation_point(line in line_at_the_limit()) {
        let classified = RULES.classify(&line);
        prop_assert!(verdict_agrees(&RULES, &line, &classified), "{line:?}");
        prop_assert_eq!(&RULES.classify(truncated(&line)), &classified);
    }
}

proptest! {
    #![proptest_config(cases(128))]

    /// A line's classification does not depend on what was classified
    /// before: one rule set in order, another in reverse order, and each
    /// line on its own after a run of dense lines, all agree.
    #[test]
    fn classification_is_pure(lines in proptest::collection::vec(line(), 1..24)) {
        static OTHER: LazyLock<LogRules> = LazyLock::new(LogRules::builtin);
        let forward: Vec<_> = lines.iter().map(|l| RULES.classify(l)).collect();
        let mut backward: Vec<_> = lines.iter().rev().map(|l| OTHER.classify(l)).collect();
        backward.reverse();
        prop_assert_eq!(&forward, &backward);
        // Each line again, each after a dense line that matches many rules.
        let dense = "NCCL WARN Xid 79 ecc error [Rank 1] ".repeat(8);
        for (line, expected) in lines.iter().zip(&forward) {
            let _ = OTHER.classify(&dense);
            prop_assert_eq!(&OTHER.classify(line), expected);
        }
    }
}

/// A user rule file made of plausible and broken pieces.
fn rules_file() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        Just("\"nccl_timeout\"".to_string()),
        Just("\"xid\"".to_string()),
        Just("\"ecc_error\"".to_string()),
        Just("\"no_such_kind\"".to_string()),
        Just("42".to_string()),
    ];
    let pattern = prop_oneof![
        Just("'(?i)boom (?P<rank>\\d+)'".to_string()),
        Just("'Xid (?P<xid>\\d+)'".to_string()),
        Just("'(unclosed'".to_string()),
        Just("'a{99999}{99999}'".to_string()),
        "[a-z()|*+?.\\\\]{0,12}".prop_map(|p| format!("'{p}'")),
    ];
    let keywords = prop_oneof![
        Just("[\"boom\"]".to_string()),
        Just("[]".to_string()),
        Just("[\"\"]".to_string()),
        Just("[\"xid\", \"ecc\"]".to_string()),
        Just("\"boom\"".to_string()),
    ];
    let name = prop_oneof![
        Just("mine".to_string()),
        Just("nvrm.xid".to_string()),
        Just("cuda.ecc_uncorrectable".to_string()),
        "[a-z.]{1,8}",
    ];
    let rule = (
        name,
        proptest::option::of(kind),
        proptest::option::of(pattern),
        proptest::option::of(keywords),
        proptest::option::of(prop_oneof![
            Just("\"SEV1\""),
            Just("\"SEV9\""),
            Just("true")
        ]),
        any::<bool>(),
    )
        .prop_map(|(name, kind, pattern, keywords, severity, disable)| {
            let mut text = format!("[[rule]]\nname = \"{name}\"\n");
            for (key, value) in [
                ("kind", kind),
                ("pattern", pattern),
                ("keywords", keywords),
                ("severity", severity.map(str::to_string)),
            ] {
                if let Some(value) = value {
                    text.push_str(&format!("{key} = {value}\n"));
                }
            }
            if disable {
                text.push_str("disable = true\n");
            }
            text
        });
    let xid = prop_oneof![
        Just(String::new()),
        Just("[xid]\necc_error = [48, 63]\n".to_string()),
        Just("[xid]\nnone = [-1]\n".to_string()),
        Just("[xid]\ndefault = 7\n".to_string()),
        Just("[xid]\nbogus = [1]\n".to_string()),
    ];
    (
        proptest::collection::vec(rule, 0..4),
        xid,
        proptest::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|(rules, xid, noise)| {
            let mut text = rules.concat() + &xid;
            // Sometimes a few stray bytes, lossily.
            text.push_str(&String::from_utf8_lossy(&noise));
            text
        })
}

proptest! {
    #![proptest_config(cases(256))]

    /// A user rules file compiles or fails with one line that names what
    /// is wrong; compiled rules classify any line without panicking.
    #[test]
    fn user_rule_files_compile_or_name_the_problem(
        text in rules_file(),
        lines in proptest::collection::vec(line(), 0..4),
    ) {
        match LogRules::with_user(&text) {
            Ok(rules) => {
                for line in &lines {
                    let classified = rules.classify(line);
                    prop_assert!(verdict_agrees(&rules, line, &classified));
                }
            }
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.contains('\n'), "{message}");
                prop_assert!(
                    message.starts_with("rules file: ") || message.starts_with("rule `"),
                    "{message}"
                );
            }
        }
    }
}

/// Found by the long run: toml's message for `[A` spans two lines.
#[test]
fn a_toml_error_in_a_rules_file_is_one_line() {
    let err = LogRules::with_user("[A").unwrap_err().to_string();
    assert_eq!(
        err,
        "rules file: line 1: invalid table header expected `.`, `]`"
    );
}

// ---------------------------------------------------------------------------
// `unicron plan`'s request.

/// A GPU count a request could carry, absurd ones included.
fn absurd_count() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(-8i64),
        Just(0i64),
        Just(1_000_000_000i64),
        Just(i64::from(u32::MAX)),
        Just(i64::from(u32::MAX) + 1),
        Just(i64::MAX),
        0i64..=100_000,
    ]
}

fn absurd_number() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        Just(0.0),
        Just(1e300),
        Just(f64::MAX),
        any::<f64>(),
    ]
}

/// A valid job: sizes in range, an increasing finite profile.
fn plan_job() -> impl Strategy<Value = PlanRequestJob> {
    let points = proptest::collection::vec((1i64..16, 0.0f64..1e16), 1..6).prop_map(|steps| {
        let mut gpus = 0;
        steps
            .into_iter()
            .map(|(step, flops)| {
                gpus += step;
                (gpus, flops)
            })
            .collect()
    });
    (
        (Just(""), 0.0f64..10.0, 0i64..72),
        (0i64..48, 0i64..48, 0i64..96, any::<bool>()),
        (0.0f64..5000.0, points),
    )
        .prop_map(
            |(
                (id, weight, unit_gpus),
                (min, extra, current_gpus, hit),
                (d_transition_s, throughput),
            )| {
                PlanRequestJob {
                    id: id.to_string(),
                    weight,
                    min_gpus: min,
                    max_gpus: min + extra,
                    unit_gpus,
                    current_gpus,
                    hit,
                    d_transition_s,
                    throughput,
                }
            },
        )
}

/// One field of a request set to something absurd.
#[derive(Debug, Clone)]
enum Corruption {
    Gpus(i64),
    Unit(i64),
    Running(f64),
    Weight(usize, f64),
    Min(usize, i64),
    Max(usize, i64),
    Current(usize, i64),
    Transition(usize, f64),
    Point(usize, usize, i64, f64),
    NoPoints(usize),
    Points(usize, usize),
    Id(usize, &'static str),
}

fn corruption() -> impl Strategy<Value = Corruption> {
    let job = any::<usize>();
    prop_oneof![
        absurd_count().prop_map(Corruption::Gpus),
        prop_oneof![
            Just(0i64),
            Just(-1i64),
            Just(1i64),
            Just(1i64 << 40),
            absurd_count()
        ]
        .prop_map(Corruption::Unit),
        absurd_number().prop_map(Corruption::Running),
        (job, absurd_number()).prop_map(|(j, v)| Corruption::Weight(j, v)),
        (job, absurd_count()).prop_map(|(j, v)| Corruption::Min(j, v)),
        (job, absurd_count()).prop_map(|(j, v)| Corruption::Max(j, v)),
        (job, absurd_count()).prop_map(|(j, v)| Corruption::Current(j, v)),
        (job, absurd_number()).prop_map(|(j, v)| Corruption::Transition(j, v)),
        (job, any::<usize>(), absurd_count(), absurd_number())
            .prop_map(|(j, p, g, f)| Corruption::Point(j, p, g, f)),
        job.prop_map(Corruption::NoPoints),
        (job, 0usize..2000).prop_map(|(j, n)| Corruption::Points(j, n)),
        (job, proptest::sample::select(vec!["j0", "j1", "", "ü"]))
            .prop_map(|(j, id)| Corruption::Id(j, id)),
    ]
}

/// Job `j` (wrapping), if there are jobs.
fn job_mut(request: &mut PlanRequest, j: usize) -> Option<&mut PlanRequestJob> {
    let n = request.jobs.len();
    request.jobs.get_mut(j % n.max(1))
}

fn corrupt(request: &mut PlanRequest, corruption: &Corruption) {
    match *corruption {
        Corruption::Gpus(v) => request.gpus = v,
        Corruption::Unit(v) => request.unit = v,
        Corruption::Running(v) => request.d_running_s = v,
        Corruption::Weight(j, v) => job_mut(request, j).into_iter().for_each(|j| j.weight = v),
        Corruption::Min(j, v) => job_mut(request, j).into_iter().for_each(|j| j.min_gpus = v),
        Corruption::Max(j, v) => job_mut(request, j).into_iter().for_each(|j| j.max_gpus = v),
        Corruption::Current(j, v) => job_mut(request, j)
            .into_iter()
            .for_each(|j| j.current_gpus = v),
        Corruption::Transition(j, v) => job_mut(request, j)
            .into_iter()
            .for_each(|j| j.d_transition_s = v),
        Corruption::Point(j, p, g, f) => job_mut(request, j).into_iter().for_each(|j| {
            let p = p % j.throughput.len().max(1);
            if let Some(point) = j.throughput.get_mut(p) {
                *point = (g, f);
            }
        }),
        Corruption::Id(j, id) => job_mut(request, j)
            .into_iter()
            .for_each(|j| j.id = id.to_string()),
        Corruption::NoPoints(j) => job_mut(request, j)
            .into_iter()
            .for_each(|j| j.throughput.clear()),
        Corruption::Points(j, count) => job_mut(request, j).into_iter().for_each(|j| {
            j.throughput = (1..=count as i64).map(|g| (g, g as f64)).collect();
        }),
    }
}

fn plan_request() -> impl Strategy<Value = PlanRequest> {
    (
        0i64..=128,
        prop_oneof![Just(1i64), Just(2), Just(4), Just(8)],
        0.0f64..100_000.0,
        proptest::collection::vec(plan_job(), 0..6),
        proptest::collection::vec(corruption(), 0..3),
    )
        .prop_map(|(gpus, unit, d_running_s, jobs, corruptions)| {
            let mut request = PlanRequest {
                gpus,
                unit,
                d_running_s,
                jobs,
            };
            for (i, job) in request.jobs.iter_mut().enumerate() {
                job.id = format!("j{i}");
            }
            for c in &corruptions {
                corrupt(&mut request, c);
            }
            request
        })
}

/// The fields an error may name.
fn is_field_path(field: &str) -> bool {
    let names = [
        "id",
        "weight",
        "min_gpus",
        "max_gpus",
        "unit_gpus",
        "current_gpus",
        "d_transition_s",
        "throughput",
    ];
    if ["gpus", "unit", "d_running_s", "jobs"].contains(&field) {
        return true;
    }
    let Some(rest) = field.strip_prefix("jobs[") else {
        return false;
    };
    let Some((index, rest)) = rest.split_once(']') else {
        return false;
    };
    if index.parse::<usize>().is_err() {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    let Some(name) = rest.strip_prefix('.') else {
        return false;
    };
    let name = match name.split_once('[') {
        Some(("throughput", point)) => {
            return point
                .strip_suffix(']')
                .is_some_and(|p| p.parse::<usize>().is_ok());
        }
        Some(_) => return false,
        None => name,
    };
    names.contains(&name)
}

/// What solving may take: the choice table (4 bytes a cell), two rows of
/// doubles, each job's options, and a little more; and never more than
/// 80 MiB, which the limits of `PlanRequest::to_problem` guarantee.
fn solve_bound(jobs: usize, cells: u64, units: u64) -> usize {
    (4 * cells + 16 * (units + 1) + 16 * (units + 2) + 256 * jobs as u64 + (64 << 10)) as usize
}

fn check_plan(request: &PlanRequest) -> Result<(), TestCaseError> {
    let problem = match request.to_problem() {
        Err(e) => {
            prop_assert!(is_field_path(&e.field), "unnamed field in `{e}`");
            prop_assert!(!e.reason.is_empty() && !e.to_string().contains('\n'));
            return Ok(());
        }
        Ok(problem) => problem,
    };
    let (cells, _) = problem.dp_size();
    prop_assert!(cells <= MAX_PLAN_CELLS);
    let units = u64::from(problem.gpus / problem.unit);
    let (response, peak) = peak_of(|| problem.respond());
    let bound = solve_bound(problem.jobs.len(), cells, units).min(80 << 20);
    prop_assert!(peak <= bound, "solving took {peak} bytes (bound {bound})");
    prop_assert!(response.waf.is_finite() && response.objective.is_finite());
    prop_assert_eq!(response.allocation.len(), problem.jobs.len());
    let mut total = 0u64;
    for job in &problem.jobs {
        let x = response.allocation[&job.id];
        total += u64::from(x);
        prop_assert!(
            x == 0 || (x >= job.min_gpus && x <= job.max_gpus && x % problem.unit == 0),
            "{}: {x} GPUs",
            job.id
        );
    }
    prop_assert!(total <= u64::from(problem.gpus));
    // Same request, same answer (docs/design.md §4).
    prop_assert_eq!(
        serde_json::to_string(&problem.respond()).unwrap(),
        serde_json::to_string(&response).unwrap()
    );
    Ok(())
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Any request is refused with a named field or solved, bounded.
    #[test]
    fn plan_requests_are_refused_by_field_or_solved(request in plan_request()) {
        check_plan(&request)?;
    }

    /// The JSON text of a request, cut or with a character changed: a
    /// parse error, or a request that passes the same check.
    #[test]
    fn plan_request_text(
        request in plan_request(),
        at in any::<usize>(),
        with in proptest::sample::select(vec!["", "-", "9", "1e999", "\"", "]", "{", "null", "[[1,2]]"]),
        cut in any::<bool>(),
    ) {
        let mut text = serde_json::to_string(&request).unwrap();
        let mut at = at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        if cut {
            text.truncate(at);
        } else {
            text.insert_str(at, with);
        }
        if let Ok(request) = serde_json::from_str::<PlanRequest>(&text) {
            check_plan(&request)?;
        }
    }
}

fn job(id: usize, min: i64, max: i64, points: usize) -> PlanRequestJob {
    PlanRequestJob {
        id: format!("j{id}"),
        weight: 1.0 + (id % 3) as f64,
        min_gpus: min,
        max_gpus: max,
        unit_gpus: 0,
        current_gpus: 0,
        hit: false,
        d_transition_s: 600.0,
        throughput: (1..=points as i64)
            .map(|p| (p * 8, (p as f64).sqrt() * 1e15))
            .collect(),
    }
}

/// Absurd sizes are refused by field; the largest accepted ones are solved
/// within the bound.
#[test]
fn absurd_plan_sizes() {
    let request = |gpus, unit, jobs| PlanRequest {
        gpus,
        unit,
        d_running_s: 86_400.0,
        jobs,
    };
    let refused = |r: PlanRequest| r.to_problem().unwrap_err().field;
    assert_eq!(refused(request(1_000_000_000, 1, vec![])), "unit");
    assert_eq!(
        refused(request(
            4096,
            8,
            (0..MAX_PLAN_JOBS + 1).map(|i| job(i, 8, 64, 4)).collect()
        )),
        "jobs"
    );
    assert_eq!(
        refused(request(4096, 8, vec![job(0, 8, 64, MAX_PLAN_POINTS + 1)])),
        "jobs[0].throughput"
    );
    assert_eq!(
        refused(request(65_536, 1, vec![job(0, 0, 65_536, 4)])),
        "jobs"
    );
    // Thousands of jobs, long profiles: solved, bounded.
    for r in [
        request(
            4096,
            8,
            (0..MAX_PLAN_JOBS).map(|i| job(i, 8, 64, 4)).collect(),
        ),
        request(4096, 8, vec![job(0, 8, 4096, MAX_PLAN_POINTS)]),
        // The largest table: 255 jobs over 65,536 units of one GPU.
        request(65_536, 1, (0..255).map(|i| job(i, 8, 8, 1)).collect()),
    ] {
        check_plan(&r).unwrap();
    }
}
