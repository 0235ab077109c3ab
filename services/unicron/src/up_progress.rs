//! `unicron up`'s waiting: the live progress line while the run goes on,
//! until Ctrl-C, the end of `--duration`, or a service failing.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use unicron_simulator::Progress;

use crate::service_set::ServiceSet;

/// Waits for Ctrl-C, the end of `--duration`, or a service failing, and
/// shows progress meanwhile.
pub(crate) async fn watch(
    duration: Option<Duration>,
    sim: Option<&unicron_simulator::Running>,
    rate: Option<f64>,
    services: &mut ServiceSet,
    stop: &mut crate::services::Stop,
) -> anyhow::Result<()> {
    if duration.is_none() {
        println!("running; Ctrl-C to stop");
    }
    // On a terminal, one line redrawn in place and cut to its width.
    let bar = (std::io::stdout().is_terminal() && sim.is_some()).then(|| {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        bar.set_style(ProgressStyle::with_template("{wide_msg}").expect("valid template"));
        bar
    });
    let deadline = async {
        match (sim, duration) {
            (Some(sim), Some(_)) => sim.ended().await,
            (None, Some(duration)) => tokio::time::sleep(duration).await,
            (_, None) => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut ticks = 0u64;
    let outcome = loop {
        tokio::select! {
            () = &mut deadline => break Ok(()),
            () = stop.wait() => break Ok(()),
            error = services.failed() => break Err(error),
            _ = ticker.tick() => {
                ticks += 1;
                if let Some(sim) = sim {
                    let line = progress_line(&sim.progress(), rate.unwrap_or(0.0));
                    match &bar {
                        Some(bar) => bar.set_message(line),
                        None if ticks.is_multiple_of(10) => println!("{line}"),
                        None => {}
                    }
                }
            }
        }
    };
    if let Some(bar) = bar {
        // The last progress stays on the screen, above the summary; the
        // bar leaves the cursor on its line.
        bar.finish();
        println!();
    }
    outcome
}

/// One line of progress, short enough for an 80-column terminal; `rate`
/// is the failure rate as a multiple of the paper setting's (0: a trace).
fn progress_line(p: &Progress, rate: f64) -> String {
    let s = p.sim_s as u64;
    let rate = if rate > 0.0 {
        format!(
            " | {}x paper rate",
            unicron_simulator::truth::rate_multiple(rate)
        )
    } else {
        String::new()
    };
    format!(
        "sim {:02}:{:02}:{:02} | failures {} detected {} healed {} | WAF {:.1}%{rate}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        p.injected,
        p.detected,
        p.acted_on,
        p.waf_fraction * 100.0
    )
}
