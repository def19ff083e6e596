//! Running librdkafka's `tests/test-runner` and parsing what it prints.
//!
//! Output formats (librdkafka 2.12.1 `tests/test.c`):
//! * summary table on stdout, `test_summary()`:
//!   `printf("|%s %-40s | %10s | %7.3fs %s|", color, name, state, secs, _C_CLR)`, then for
//!   FAILED/SKIPPED ` <failstr>` and an optional ` <-- known issue...` / ` <extra>`; states
//!   are `DNS SKIPPED RUNNING PASSED FAILED`; the table starts with
//!   `TEST <date> (<mode>, scenario <s>) SUMMARY`. It can appear more than once (the
//!   watchdog prints it before failing a timed-out test); later rows win.
//! * progress on stderr, `run_test0()`: `[<name> / 1.234s] ================= Test <name>
//!   PASSED|FAILED|SKIPPED =================`, `================= Running test <name> ...`,
//!   and `test_fail0()`: `### Test "<name>[ (<subtest>)]" failed at <file>:<line>:<fn>() at
//!   <date>: ###` followed by the reason on the next line.
//!
//! All of it is wrapped in ANSI colour codes, which are stripped first.

use std::collections::BTreeMap;

/// Outcome of one test number (all its variants together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        }
    }
}

/// State of one test variant (`0086_purge_remote`) as reported by the runner.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub name: String,
    /// `PASSED`, `FAILED`, `SKIPPED`, `RUNNING`, `DNS` (did not start), or `STARTED`
    /// (progress markers showed it starting but never finishing).
    pub state: String,
    pub secs: Option<f64>,
    pub reason: String,
}

/// What the runner's output says about a test number.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// Variants of this number, in order of appearance.
    pub variants: Vec<Variant>,
    /// Whether the summary table was found (else progress markers were used).
    pub from_summary: bool,
}

/// Remove ANSI escape sequences (`ESC [ ... final-byte`) and stray `ESC`s.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // parameters/intermediates until a final byte in 0x40..=0x7e
                for c2 in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c2) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Parse one summary row `| name | STATE | 1.234s | reason`; `None` if not a row.
pub fn parse_summary_row(line: &str) -> Option<Variant> {
    let line = line.trim_end();
    let rest = line.strip_prefix('|')?;
    let mut parts = rest.splitn(4, '|');
    let name = parts.next()?.trim();
    let state = parts.next()?.trim();
    let secs = parts.next()?.trim();
    let reason = parts.next().unwrap_or("").trim();
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    if !matches!(state, "PASSED" | "FAILED" | "SKIPPED" | "RUNNING" | "DNS") {
        return None;
    }
    let secs = secs.strip_suffix('s')?.trim().parse::<f64>().ok()?;
    Some(Variant {
        name: name.to_string(),
        state: state.to_string(),
        secs: Some(secs),
        reason: reason.to_string(),
    })
}

fn belongs(name: &str, num: &str) -> bool {
    name.starts_with(num) && name != "<MAIN>"
}

/// Parse the combined stdout+stderr of a `test-runner` run for test number `num`
/// (4 digits).
pub fn parse_output(raw: &str, num: &str) -> Parsed {
    let text = strip_ansi(raw);
    // 1. summary table rows (later tables override earlier ones)
    let mut rows: Vec<Variant> = Vec::new();
    for line in text.lines() {
        if let Some(v) = parse_summary_row(line) {
            if !belongs(&v.name, num) {
                continue;
            }
            if let Some(old) = rows.iter_mut().find(|o| o.name == v.name) {
                *old = v;
            } else {
                rows.push(v);
            }
        }
    }
    if !rows.is_empty() {
        return Parsed {
            variants: rows,
            from_summary: true,
        };
    }

    // 2. progress markers
    let mut vars: Vec<Variant> = Vec::new();
    let get = |vars: &mut Vec<Variant>, name: &str| -> usize {
        if let Some(i) = vars.iter().position(|v| v.name == name) {
            i
        } else {
            vars.push(Variant {
                name: name.to_string(),
                state: "STARTED".into(),
                secs: None,
                reason: String::new(),
            });
            vars.len() - 1
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = after(line, "================= Running test ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            if belongs(name, num) {
                get(&mut vars, name);
            }
        } else if let Some(rest) = after(line, "================= Test ") {
            let mut it = rest.split_whitespace();
            let (name, state) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
            if belongs(name, num) && matches!(state, "PASSED" | "FAILED" | "SKIPPED") {
                let idx = get(&mut vars, name);
                let v = &mut vars[idx];
                v.state = state.to_string();
                v.secs = progress_secs(line);
            }
        } else if let Some(rest) = after(line, "### Test \"") {
            // ### Test "NAME (subtest)" failed at file:line:fn() at DATE: ###\nREASON
            let quoted = rest.split('"').next().unwrap_or("");
            let name = quoted.split(" (").next().unwrap_or("");
            if belongs(name, num) {
                let idx = get(&mut vars, name);
                let v = &mut vars[idx];
                if v.state != "PASSED" {
                    v.state = "FAILED".into();
                }
                if v.reason.is_empty() {
                    let next = lines.get(i + 1).map(|s| s.trim()).unwrap_or("");
                    v.reason = if next.is_empty() {
                        format!("failed ({quoted})")
                    } else {
                        next.to_string()
                    };
                }
            }
        } else if let Some(rest) = after(line, "SKIPPING TEST: ") {
            // TEST_WARN("SKIPPING TEST: %s") is printed with the test's name prefix
            if let Some(name) = progress_name(line) {
                if belongs(&name, num) {
                    let idx = get(&mut vars, &name);
                    if vars[idx].reason.is_empty() {
                        vars[idx].reason = rest.trim().to_string();
                    }
                }
            }
        }
    }
    Parsed {
        variants: vars,
        from_summary: false,
    }
}

fn after<'a>(line: &'a str, pat: &str) -> Option<&'a str> {
    line.find(pat).map(|i| &line[i + pat.len()..])
}

/// `[0004_conf                   /  0.015s] ...` -> 0.015
fn progress_secs(line: &str) -> Option<f64> {
    let l = line.trim_start();
    let inner = l.strip_prefix('[')?.split(']').next()?;
    inner
        .rsplit('/')
        .next()?
        .trim()
        .strip_suffix('s')?
        .trim()
        .parse()
        .ok()
}

fn progress_name(line: &str) -> Option<String> {
    let l = line.trim_start();
    let inner = l.strip_prefix('[')?.split(']').next()?;
    Some(inner.split('/').next()?.trim().to_string())
}

/// Final verdict for a test number.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub outcome: Outcome,
    pub reason: String,
}

/// How the runner process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Exit code (or 128+signal for a signal).
    Exited(i32),
    /// Killed by the harness after this many seconds.
    TimedOut(u64),
    /// Could not be started at all.
    NotStarted,
}

/// Combine the parsed variants and how the process ended into one verdict:
/// any variant FAILED/RUNNING/STARTED -> FAIL; else any PASSED -> PASS (but FAIL if the
/// runner then died abnormally, e.g. leaked librdkafka threads); else SKIP.
/// A timeout is always a FAIL.
pub fn verdict(p: &Parsed, end: RunEnd) -> Verdict {
    let failed: Vec<&Variant> = p
        .variants
        .iter()
        .filter(|v| matches!(v.state.as_str(), "FAILED" | "RUNNING" | "STARTED"))
        .collect();
    let describe = |v: &Variant| -> String {
        let r = match v.state.as_str() {
            "RUNNING" => "still running when the runner stopped".to_string(),
            "STARTED" if v.reason.is_empty() => "started but never finished".to_string(),
            _ => v.reason.clone(),
        };
        if p.variants.len() > 1 || r.is_empty() {
            format!(
                "{}: {}",
                v.name,
                if r.is_empty() { "failed".into() } else { r }
            )
        } else {
            r
        }
    };
    if let RunEnd::TimedOut(secs) = end {
        let mut r = format!("timeout after {secs}s");
        if let Some(v) = failed.first() {
            r.push_str("; ");
            r.push_str(&describe(v));
        }
        return Verdict {
            outcome: Outcome::Fail,
            reason: r,
        };
    }
    if let RunEnd::NotStarted = end {
        return Verdict {
            outcome: Outcome::Fail,
            reason: "test-runner could not be started".into(),
        };
    }
    let RunEnd::Exited(code) = end else {
        unreachable!()
    };
    if !failed.is_empty() {
        let mut r = failed
            .iter()
            .map(|v| describe(v))
            .collect::<Vec<_>>()
            .join(" | ");
        if failed.len() > 1 {
            r = format!("{} variants failed: {r}", failed.len());
        }
        return Verdict {
            outcome: Outcome::Fail,
            reason: r,
        };
    }
    let passed = p.variants.iter().any(|v| v.state == "PASSED");
    if passed {
        if code != 0 {
            return Verdict {
                outcome: Outcome::Fail,
                reason: format!(
                    "test-runner exited with status {code} after the test passed (e.g. leaked librdkafka threads)"
                ),
            };
        }
        return Verdict {
            outcome: Outcome::Pass,
            reason: String::new(),
        };
    }
    if p.variants.is_empty() {
        if code != 0 {
            return Verdict {
                outcome: Outcome::Fail,
                reason: format!("test-runner exited with status {code} and reported no result"),
            };
        }
        return Verdict {
            outcome: Outcome::Skip,
            reason: "not run by test-runner (no such test number, or silently filtered: scenario/flags/-L)".into(),
        };
    }
    // only skipped / did-not-start variants
    let reasons: BTreeMap<&str, ()> = p
        .variants
        .iter()
        .filter(|v| !v.reason.is_empty())
        .map(|v| {
            let r = v.reason.as_str();
            if r == "Filtered due to negative test flags" {
                (
                    "Filtered due to negative test flags (broker-less variant, excluded by -L)",
                    (),
                )
            } else {
                (r, ())
            }
        })
        .collect();
    let reason = if reasons.is_empty() {
        "skipped".to_string()
    } else {
        reasons.into_keys().collect::<Vec<_>>().join("; ")
    };
    if code != 0 {
        return Verdict {
            outcome: Outcome::Fail,
            reason: format!("test-runner exited with status {code}; variants skipped: {reason}"),
        };
    }
    Verdict {
        outcome: Outcome::Skip,
        reason,
    }
}

/// Read a list of test numbers: one per line (or whitespace separated), `#` starts a
/// comment. Numbers are normalised to 4 digits.
pub fn parse_test_list(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for tok in line.split_whitespace() {
            out.push(normalize_test_number(tok).map_err(|e| format!("line {}: {e}", i + 1))?);
        }
    }
    Ok(out)
}

/// `"1"` -> `"0001"`, `"0086"` -> `"0086"`; rejects anything that is not 1-4 digits
/// (the runner's TESTS filter is a substring match, so exactly 4 digits are needed).
pub fn normalize_test_number(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid test number {s:?}: expected 1-4 digits like 0001 (one test number, not a name)"
        ));
    }
    Ok(format!("{:0>4}", s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAIL_0086: &str = include_str!("../testdata/0086-failed-no-broker.log");
    const FAIL_0001: &str = include_str!("../testdata/0001-failed-no-broker.log");
    const PASS_0004: &str = include_str!("../testdata/0004-passed-local.log");

    #[test]
    fn strip() {
        assert_eq!(strip_ansi("\x1b[0m\x1b[36m[x] \x1b[32mok\x1b[0m"), "[x] ok");
    }

    #[test]
    fn row_formats() {
        // exactly what printf("|%s %-40s | %10s | %7.3fs %s|", ...) produces
        let row = format!(
            "|\x1b[31m {:<40} | {:>10} | {:>7.3}s \x1b[0m|\x1b[31m {}\x1b[0m",
            "0001_multiobj", "FAILED", 0.998, "test_error_cb():714: boom | pipe"
        );
        let v = parse_summary_row(&strip_ansi(&row)).unwrap();
        assert_eq!(v.name, "0001_multiobj");
        assert_eq!(v.state, "FAILED");
        assert_eq!(v.secs, Some(0.998));
        assert_eq!(v.reason, "test_error_cb():714: boom | pipe");
        assert!(parse_summary_row("| elapsed | msgs |").is_none());
        assert!(parse_summary_row("#====#").is_none());
    }

    #[test]
    fn summary_with_local_variant_skipped() {
        let p = parse_output(FAIL_0086, "0086");
        assert!(p.from_summary);
        assert_eq!(p.variants.len(), 2);
        assert_eq!(p.variants[0].name, "0086_purge_local");
        assert_eq!(p.variants[0].state, "SKIPPED");
        assert_eq!(p.variants[1].state, "FAILED");
        let v = verdict(&p, RunEnd::Exited(134));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(
            v.reason
                .contains("0086_purge_remote: test_admin_create_topic():5163"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn summary_fail_single() {
        let p = parse_output(FAIL_0001, "0001");
        assert!(p.from_summary);
        let v = verdict(&p, RunEnd::Exited(134));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(v.reason.starts_with("test_error_cb():714:"), "{}", v.reason);
    }

    #[test]
    fn summary_pass() {
        let p = parse_output(PASS_0004, "0004");
        assert!(p.from_summary);
        assert_eq!(verdict(&p, RunEnd::Exited(0)).outcome, Outcome::Pass);
        // passed but the runner aborted afterwards
        assert_eq!(verdict(&p, RunEnd::Exited(134)).outcome, Outcome::Fail);
        // timeout always fails
        assert_eq!(verdict(&p, RunEnd::TimedOut(5)).outcome, Outcome::Fail);
    }

    fn cut_before_summary(s: &str) -> &str {
        &s[..s
            .find("SUMMARY")
            .map(|i| s[..i].rfind('\n').unwrap_or(0))
            .unwrap()]
    }

    #[test]
    fn progress_markers_only() {
        let p = parse_output(cut_before_summary(PASS_0004), "0004");
        assert!(!p.from_summary);
        assert_eq!(p.variants.len(), 1);
        assert_eq!(p.variants[0].state, "PASSED");
        assert_eq!(p.variants[0].secs, Some(0.015));
        assert_eq!(verdict(&p, RunEnd::Exited(0)).outcome, Outcome::Pass);

        let p = parse_output(cut_before_summary(FAIL_0001), "0001");
        assert!(!p.from_summary);
        assert_eq!(p.variants[0].state, "FAILED");
        assert!(
            p.variants[0]
                .reason
                .starts_with("0001_multiobj#producer-1 rdkafka error"),
            "{:?}",
            p.variants
        );
        let v = verdict(&p, RunEnd::TimedOut(300));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(v.reason.starts_with("timeout after 300s; "), "{}", v.reason);
    }

    #[test]
    fn started_never_finished() {
        let s = "\x1b[36m[0001_multiobj               /  0.000s] ================= Running test 0001_multiobj =================\n";
        let p = parse_output(s, "0001");
        assert_eq!(p.variants[0].state, "STARTED");
        let v = verdict(&p, RunEnd::Exited(139));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(v.reason.contains("never finished"));
    }

    #[test]
    fn nothing_reported() {
        let p = parse_output("", "0004");
        assert_eq!(verdict(&p, RunEnd::Exited(0)).outcome, Outcome::Skip);
        assert_eq!(verdict(&p, RunEnd::Exited(127)).outcome, Outcome::Fail);
    }

    #[test]
    fn skipped_with_reason() {
        let s = "|\x1b[36m 0097_ssl_verify                          |    SKIPPED |   0.001s \x1b[0m|\x1b[36m Test requires SSL_* env-vars set up by trivup\x1b[0m\n";
        let p = parse_output(s, "0097");
        let v = verdict(&p, RunEnd::Exited(0));
        assert_eq!(v.outcome, Outcome::Skip);
        assert_eq!(v.reason, "Test requires SSL_* env-vars set up by trivup");
    }

    #[test]
    fn lists() {
        assert_eq!(
            parse_test_list("# header\n0001\n 2  # two\n\n0110\n").unwrap(),
            vec!["0001", "0002", "0110"]
        );
        assert!(parse_test_list("0001_multiobj\n").is_err());
        assert!(normalize_test_number("12345").is_err());
    }
}
