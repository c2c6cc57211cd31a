//! The broker's memory during one bench run: its resident set (VmRSS) when the run
//! starts and its peak (VmHWM) when it ends, from `/proc/<pid>/status`. The peak is
//! reset first (`5` into `/proc/<pid>/clear_refs`, Linux ≥ 4.0), so it is this run's
//! own and not the highest of an earlier one; if the reset is refused, the peak counts
//! from the process's start and the sample says so.
//!
//! With `--embedded` the broker runs inside the bench, so the process measured is the
//! bench itself: broker and coordinator plus the bench's producer and read-back
//! consumer. `--broker-pid` measures a separate broker process instead.

use std::path::PathBuf;

/// Which process holds the broker.
#[derive(Debug, Clone, Copy)]
pub enum BrokerProcess {
    /// The broker runs in this process (`--embedded`).
    InProcess,
    Pid(u32),
}

impl BrokerProcess {
    fn proc_dir(self) -> PathBuf {
        match self {
            BrokerProcess::InProcess => PathBuf::from("/proc/self"),
            BrokerProcess::Pid(pid) => PathBuf::from(format!("/proc/{pid}")),
        }
    }

    /// Resets the peak and reads the resident set: call when the run starts.
    pub fn start(self) -> Option<RunStart> {
        let peak_reset = std::fs::write(self.proc_dir().join("clear_refs"), "5").is_ok();
        let (rss_kib, _) = self.read()?;
        Some(RunStart {
            process: self,
            rss_kib,
            peak_reset,
        })
    }

    fn read(self) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(self.proc_dir().join("status")).ok()?;
        parse_status(&text)
    }
}

/// The broker's process as a run began.
#[derive(Debug, Clone, Copy)]
pub struct RunStart {
    process: BrokerProcess,
    rss_kib: u64,
    peak_reset: bool,
}

impl RunStart {
    /// The run's memory, read when it ends.
    pub fn finish(self) -> Option<BrokerMemory> {
        let (rss_kib, peak_kib) = self.process.read()?;
        Some(BrokerMemory {
            process: match self.process {
                BrokerProcess::InProcess => "in-process (broker + bench)".into(),
                BrokerProcess::Pid(pid) => format!("pid {pid}"),
            },
            rss_start_mib: mib(self.rss_kib),
            rss_peak_mib: mib(peak_kib),
            rss_end_mib: mib(rss_kib),
            peak_since_process_start: !self.peak_reset,
        })
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BrokerMemory {
    /// What was measured: the bench's own process, or the broker's pid.
    pub process: String,
    pub rss_start_mib: f64,
    /// VmHWM: the highest resident set during the run (produce and read-back).
    pub rss_peak_mib: f64,
    pub rss_end_mib: f64,
    /// The peak could not be reset, so it may be an earlier run's.
    pub peak_since_process_start: bool,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `(VmRSS, VmHWM)` in KiB from the text of `/proc/<pid>/status`.
fn parse_status(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    Some((field("VmRSS")?, field("VmHWM")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_the_resident_set_and_its_peak_in_kib() {
        let status = "Name:\tidem\nVmPeak:\t 2000000 kB\nVmHWM:\t  512000 kB\nVmRSS:\t  256000 kB\nRssAnon:\t  200000 kB\n";
        assert_eq!(parse_status(status), Some((256_000, 512_000)));
    }

    #[test]
    fn a_status_without_both_fields_gives_nothing() {
        assert_eq!(parse_status("Name:\tkthreadd\nVmRSS:\t 12 kB\n"), None);
        assert_eq!(parse_status("VmHWM:\t 12 kB\nVmRSS:\t lots kB\n"), None);
        assert_eq!(parse_status("VmRSSX:\t 1 kB\nVmHWM:\t 2 kB\n"), None);
    }

    #[test]
    fn this_process_can_be_measured() {
        let start = BrokerProcess::InProcess.start().expect("/proc/self/status");
        let memory = start.finish().expect("/proc/self/status");
        assert!(memory.rss_peak_mib >= memory.rss_end_mib.min(memory.rss_start_mib));
        assert!(memory.rss_end_mib > 0.0);
    }
}
