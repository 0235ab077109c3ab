//! Where log lines go. Commands log to stderr (stdout is for their output).
//! `unicron up` is a local demo whose terminal shows a progress line and a
//! summary: unless `-v`, its logs go to a file in the run's directory, and
//! lines logged before it knows that file are held and written there first.
//! `RUST_LOG` filters in every case.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Lines held before the file is known stop growing past this.
const HELD_MAX_BYTES: usize = 1 << 20;

enum Target {
    Stderr,
    Held(Vec<u8>),
    #[cfg_attr(not(feature = "simulator"), allow(dead_code))]
    File(File),
}

static TARGET: Mutex<Target> = Mutex::new(Target::Stderr);

fn target() -> MutexGuard<'static, Target> {
    TARGET.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs the subscriber. With `to_file`, lines are held until
/// [`write_to_file`] names the file.
pub fn init(to_file: bool) {
    if to_file {
        *target() = Target::Held(Vec::new());
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,unicron=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(!to_file && io::stderr().is_terminal())
        .with_writer(|| LogWriter)
        .init();
}

/// Sends the log to `path` (appended), after the lines held so far.
#[cfg_attr(not(feature = "simulator"), allow(dead_code))]
pub fn write_to_file(path: &Path) -> io::Result<()> {
    let mut file = File::options().create(true).append(true).open(path)?;
    let mut target = target();
    if let Target::Held(held) = &*target {
        file.write_all(held)?;
    }
    *target = Target::File(file);
    Ok(())
}

/// One write of the subscriber: a whole formatted line.
struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut *target() {
            Target::Stderr => io::stderr().write(buf),
            Target::Held(held) => {
                if held.len() + buf.len() <= HELD_MAX_BYTES {
                    held.extend_from_slice(buf);
                }
                Ok(buf.len())
            }
            Target::File(file) => file.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut *target() {
            Target::Stderr => io::stderr().flush(),
            Target::Held(_) => Ok(()),
            Target::File(file) => file.flush(),
        }
    }
}
