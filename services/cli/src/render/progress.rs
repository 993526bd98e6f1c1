//! The live progress line of `cohort train watch`: on a terminal one line
//! redrawn in place (other messages print above it); elsewhere one plain line
//! per progress event, so logs stay readable.

use super::float;
use crate::errors::CliError;
use cohort_proto::v1::ProgressEvent;
use std::io::{IsTerminal, Write};

const BAR_WIDTH: usize = 30;

pub struct ProgressLine {
    live: bool,
    /// Whether the bar is on screen (the cursor is at the end of its line).
    drawn: bool,
    /// The bar's newest text, redrawn below each message.
    last: Option<String>,
    /// The time left, from the recent step rate.
    eta: super::eta::Eta,
}

impl ProgressLine {
    /// A live bar when stdout is a terminal.
    pub fn new() -> Self {
        Self {
            live: std::io::stdout().is_terminal(),
            drawn: false,
            last: None,
            eta: super::eta::Eta::default(),
        }
    }

    /// Prints a message on its own line, keeping the bar below it.
    pub fn message(&mut self, text: &str) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        if self.drawn {
            write!(out, "\r\x1b[2K")?;
            self.drawn = false;
        }
        writeln!(out, "{text}")?;
        if let (true, Some(bar)) = (self.live, &self.last) {
            write!(out, "{bar}")?;
            self.drawn = true;
        }
        out.flush()?;
        Ok(())
    }

    /// Shows the newest progress, stored at `at_s` (seconds), with the
    /// time left at the recent rate.
    pub fn update(&mut self, p: &ProgressEvent, at_s: f64) -> Result<(), CliError> {
        self.eta.observe(at_s, p.step);
        let eta = self.eta.suffix(p.total_steps);
        self.show(format!("{}{eta}", progress_text(p)))
    }

    /// Shows a program's progress line, with the time left when it gave its total.
    pub fn update_program(
        &mut self,
        p: &cohort_proto::v1::ProgramProgress,
        at_s: f64,
    ) -> Result<(), CliError> {
        self.eta.observe(at_s, p.step);
        let eta = p
            .total_steps
            .map(|t| self.eta.suffix(t))
            .unwrap_or_default();
        self.show(format!("{}{eta}", super::program::progress_text(p)))
    }

    /// Shows `text` as the newest progress (a program's line).
    pub fn show(&mut self, text: String) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        if self.live {
            write!(out, "\r\x1b[2K{text}")?;
            self.drawn = true;
            self.last = Some(text);
        } else {
            writeln!(out, "{text}")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Ends the bar's line so later output starts on a fresh one.
    pub fn finish(&mut self) -> Result<(), CliError> {
        if self.drawn {
            let mut out = std::io::stdout().lock();
            writeln!(out)?;
            out.flush()?;
            self.drawn = false;
        }
        Ok(())
    }
}

/// `[#########.....] 120/500  24%  loss 0.0123  L0 8.0  EV 0.874  dead 0.0%  lr 0.0010  1234 samples/s`
/// (plus the non-finite steps skipped, when any).
pub fn progress_text(p: &ProgressEvent) -> String {
    let fraction = if p.total_steps > 0 {
        (p.step as f64 / p.total_steps as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let filled = (fraction * BAR_WIDTH as f64).round() as usize;
    let skipped = if p.nonfinite_steps > 0 {
        format!("  {} non-finite steps skipped", p.nonfinite_steps)
    } else {
        String::new()
    };
    format!(
        "[{}{}] {}/{} {:>3.0}%  loss {}  {}  {:.0} samples/s{skipped}",
        "#".repeat(filled),
        "-".repeat(BAR_WIDTH - filled),
        p.step,
        p.total_steps,
        fraction * 100.0,
        float(p.loss),
        sae_metrics(p),
        p.samples_per_sec,
    )
}

/// `L0 8.0  EV 0.874  dead 0.0%  lr 0.0010`: what an SAE is judged by.
pub fn sae_metrics(p: &ProgressEvent) -> String {
    format!(
        "L0 {:.1}  EV {:.3}  dead {:.1}%  lr {}",
        p.l0,
        p.explained_variance,
        p.dead_fraction * 100.0,
        float(p.learning_rate)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_text() {
        let mut p = ProgressEvent {
            step: 50,
            total_steps: 200,
            loss: 0.0123,
            samples_per_sec: 1234.4,
            l0: 7.95,
            explained_variance: 0.87412,
            dead_fraction: 0.0125,
            learning_rate: 0.001,
            ..Default::default()
        };
        assert_eq!(
            progress_text(&p),
            "[########----------------------] 50/200  25%  loss 0.0123  L0 8.0  EV 0.874  dead 1.2%  lr 0.0010  1234 samples/s"
        );
        p.nonfinite_steps = 3;
        assert!(progress_text(&p).ends_with("1234 samples/s  3 non-finite steps skipped"));
    }
}
