//! `linkem bridge --record DIR`: every input of the live model kept in a
//! recording directory ([`linkem_io::recording`], docs/recording.md), so that
//! `linkem replay DIR OUT` feeds the same model the same inputs and makes the
//! same decisions.
//!
//! The stage hands its [`Tap`] each wire frame it gives the model (side, the
//! clamped stamp the model got, the bytes as cut) and each request of changes
//! at the instant they apply, in the one order the model sees them; the
//! [`Recorder`] only copies them into its bounded queue (a frame that finds it
//! full is skipped and counted, never waited for). Changes are kept as what
//! carries them: control lines ([`Change`]'s `Display`) or, for a whole rule
//! set (a reload), its text.
//!
//! [`BridgeTap`] fans the stage's one tap out to `--events` and `--record`,
//! either or both. [`RecordSink`] is the bridge's end: it says once when the
//! recording stops early (its limit), and at exit where the recording is and
//! whether it is complete.

use crate::sinks::events::EventsTap;
use linkem_core::model::Change;
use linkem_core::node::Decision;
use linkem_core::rules::Side;
use linkem_io::recording::{
    RecordedChange, Recorder, RecordingError, RecordingMeta, RecordingSummary, RecordingWatch,
};
use linkem_runtime::pipeline::Tap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// What a recording of a live bridge holds frames of: Ethernet (DLT_EN10MB).
pub const LINK_TYPE_ETHERNET: u32 = 1;

/// The snap length recorded: frames are kept whole, and a frame the stage
/// gives the model is at most an egress frame, well within it.
pub const SNAPLEN: u32 = linkem_io::capture::MAX_CAPLEN;

/// The changes of one request as the recording keeps them, in order: runs of
/// changes that a control line carries as one `lines` entry, a whole rule set
/// (a reload) as its text.
pub fn recorded_changes(changes: &[Change]) -> Vec<RecordedChange> {
    let mut out: Vec<RecordedChange> = Vec::new();
    for change in changes {
        match change {
            Change::Rules { text, files, .. } => out.push(RecordedChange::Rules(
                text.to_string(),
                files.iter().cloned().collect(),
            )),
            line => match out.last_mut() {
                Some(RecordedChange::Lines(lines)) => lines.push(line.to_string()),
                _ => out.push(RecordedChange::Lines(vec![line.to_string()])),
            },
        }
    }
    out
}

/// The stage's end of `--record`: copies inputs into the recorder; gives the
/// recorder back to the bridge when the stage drops it.
pub struct RecordTap {
    recorder: Option<Recorder>,
    back: SyncSender<Recorder>,
}

impl RecordTap {
    #[inline]
    fn frame(&mut self, side: Side, ts_ns: u64, bytes: &[u8]) {
        if let Some(r) = self.recorder.as_mut() {
            r.frame(side.index(), ts_ns, bytes.len() as u32, bytes);
        }
    }

    fn start(&mut self, t0_ns: u64) {
        if let Some(r) = self.recorder.as_mut() {
            r.record_start(t0_ns);
        }
    }

    fn changes(&mut self, at_ns: u64, changes: &[Change]) {
        if let Some(r) = self.recorder.as_mut() {
            for change in recorded_changes(changes) {
                r.change(at_ns, change);
            }
        }
    }
}

impl Drop for RecordTap {
    fn drop(&mut self) {
        if let Some(r) = self.recorder.take() {
            // The bridge gone (it failed), the recorder's own drop flushes it.
            let _ = self.back.try_send(r);
        }
    }
}

/// The stage's one tap: `--events`, `--record`, or both.
#[derive(Default)]
pub struct BridgeTap {
    /// `--events`.
    pub events: Option<EventsTap>,
    /// `--record`.
    pub record: Option<RecordTap>,
    /// `--log-a-to-b`, `--log-b-to-a`.
    pub log: Option<crate::sinks::mmlog::LogTap>,
    /// The time series of `--stats json --stats-interval T --series`.
    pub series: Option<crate::sinks::series::Series>,
}

impl BridgeTap {
    /// The tap for the stage, or None when neither output is asked for.
    pub fn boxed(self) -> Option<Box<dyn Tap>> {
        if self.events.is_none()
            && self.record.is_none()
            && self.log.is_none()
            && self.series.is_none()
        {
            return None;
        }
        Some(Box::new(self))
    }
}

impl Tap for BridgeTap {
    #[inline]
    fn frame(&mut self, side: Side, ts_ns: u64, bytes: &[u8]) {
        if let Some(r) = self.record.as_mut() {
            r.frame(side, ts_ns, bytes);
        }
    }

    #[inline]
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        if let Some(e) = self.events.as_mut() {
            e.decision(arrival_ns, len_bytes, d);
        }
        if let Some(l) = self.log.as_mut() {
            l.decision(arrival_ns, len_bytes, d);
        }
        if let Some(s) = self.series.as_mut() {
            s.add(arrival_ns, len_bytes, d);
        }
    }

    fn changes(&mut self, at_ns: u64, changes: &[Change]) {
        if let Some(r) = self.record.as_mut() {
            r.changes(at_ns, changes);
        }
    }

    fn start(&mut self, t0_ns: u64) {
        if let Some(r) = self.record.as_mut() {
            r.start(t0_ns);
        }
        if let Some(l) = self.log.as_mut() {
            l.start(t0_ns);
        }
    }
}

/// The bridge's end of `--record`: the recorder until the stage takes it,
/// then its watch, and the recorder again once the stage has stopped.
pub struct RecordSink {
    dir: PathBuf,
    /// The recorder before the stage has it; discarded if the bridge never starts.
    unstarted: Option<Recorder>,
    watch: RecordingWatch,
    back: Receiver<Recorder>,
    back_tx: Option<SyncSender<Recorder>>,
    told_stop: bool,
}

impl RecordSink {
    /// Creates the recording in `dir` (new, or an empty directory) for a run
    /// described by `meta`, `frames.pcapng` at most `limit_bytes`.
    ///
    /// # Errors
    /// `dir` is a file or a directory holding files, its parent is missing, or
    /// it cannot be written.
    pub fn create(
        dir: &Path,
        meta: RecordingMeta,
        limit_bytes: u64,
    ) -> Result<RecordSink, RecordingError> {
        let recorder = Recorder::create(dir, meta, limit_bytes)?;
        let (back_tx, back) = sync_channel(1);
        Ok(RecordSink {
            dir: dir.to_path_buf(),
            watch: recorder.watch(),
            unstarted: Some(recorder),
            back,
            back_tx: Some(back_tx),
            told_stop: false,
        })
    }

    /// The tap that feeds the recorder, for the stage (once).
    pub fn tap(&mut self) -> Option<RecordTap> {
        let recorder = self.unstarted.take()?;
        let back = self.back_tx.take()?;
        Some(RecordTap {
            recorder: Some(recorder),
            back,
        })
    }

    /// The line to print once recording has stopped before the run's end (its
    /// limit reached, a write failed), the first time it is seen.
    pub fn stop_notice(&mut self) -> Option<String> {
        if self.told_stop {
            return None;
        }
        let why = self.watch.stopped()?;
        self.told_stop = true;
        Some(format!(
            "linkem: --record {}: recording stopped: {why}; the bridge goes on forwarding \
             (the recording holds the run up to there)",
            self.dir.display()
        ))
    }

    /// The bridge never started (nothing was recorded): removes the recording.
    pub fn discard(mut self) {
        if let Some(r) = self.unstarted.take() {
            r.discard();
        } else if let Ok(r) = self.back.try_recv() {
            r.discard();
        }
    }

    /// Once the stage has dropped its tap: finishes the recording and says
    /// where it is and whether it is complete.
    ///
    /// # Errors
    /// `recording.json` cannot be rewritten, or the stage never gave the
    /// recorder back.
    pub fn finish(mut self) -> anyhow::Result<RecordingSummary> {
        let recorder = match self.unstarted.take() {
            Some(r) => r,
            None => self.back.try_recv().map_err(|_| {
                anyhow::anyhow!(
                    "--record {}: the recorder was lost; the recording is incomplete",
                    self.dir.display()
                )
            })?,
        };
        // A stop seen only now is still told once, before the summary.
        if let Some(line) = self.stop_notice() {
            eprintln!("{line}");
        }
        let summary = recorder
            .finish()
            .map_err(|e| anyhow::anyhow!("--record: {e}"))?;
        eprintln!("{}", summary_line(&self.dir, &summary));
        Ok(summary)
    }
}

impl Drop for RecordSink {
    fn drop(&mut self) {
        // Dropped with the recorder never handed to a stage: the bridge failed
        // to start, so the recording holds nothing of a run.
        if let Some(r) = self.unstarted.take() {
            r.discard();
        }
    }
}

/// What the bridge prints at exit of its recording.
pub fn summary_line(dir: &Path, s: &RecordingSummary) -> String {
    let counts = format!(
        "{} frames, {} changes, {} bytes of frames",
        s.frames, s.changes, s.bytes
    );
    if s.complete {
        return format!(
            "linkem: --record: complete recording in {} ({counts}); replay it with \
             'linkem replay {} OUT'",
            dir.display(),
            dir.display()
        );
    }
    let mut why = Vec::new();
    if let Some(stopped) = &s.stopped {
        why.push(format!("recording stopped: {stopped}"));
    }
    if s.skipped > 0 {
        why.push(format!(
            "{} frames skipped (the disk did not keep up)",
            s.skipped
        ));
    }
    format!(
        "linkem: --record: INCOMPLETE recording in {} ({counts}; {})",
        dir.display(),
        why.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_core::rules::parse_rules;
    use linkem_core::LinkSpec;
    use linkem_io::recording::{RecordedInput, Recording, Start};
    use std::sync::Arc;

    fn link(words: &str) -> Change {
        Change::Link {
            sides: [true, false],
            config: Box::new(LinkSpec::parse(words).unwrap().link),
        }
    }

    fn rules(text: &str) -> Change {
        Change::Rules {
            set: Box::new(parse_rules(text, ["a", "b"], &mut |_| Err(String::new())).unwrap()),
            text: Arc::from(text),
            files: Vec::new(),
        }
    }

    #[test]
    fn changes_are_kept_as_their_lines_and_a_reload_as_its_text_in_order() {
        let got = recorded_changes(&[
            link("delay 1ms"),
            link("rate 1Mbit/s"),
            rules("flush\n"),
            link("delay 2ms"),
        ]);
        let line = |words: &str| link(words).to_string();
        assert_eq!(line("delay 1ms"), "replace a-to-b queue 1000 delay 1ms");
        assert_eq!(
            got,
            [
                RecordedChange::Lines(vec![line("delay 1ms"), line("rate 1Mbit/s")]),
                RecordedChange::Rules("flush\n".into(), Default::default()),
                RecordedChange::Lines(vec![line("delay 2ms")]),
            ]
        );
        assert!(recorded_changes(&[]).is_empty());
    }

    fn meta() -> RecordingMeta {
        RecordingMeta::new(
            5,
            LINK_TYPE_ETHERNET,
            SNAPLEN,
            ["a0".into(), "b0".into()],
            Start::Link("delay 1ms".into()),
        )
    }

    #[test]
    fn the_tap_records_frames_and_changes_in_the_order_fed_and_the_sink_finishes_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rec");
        let mut sink = RecordSink::create(&dir, meta(), u64::MAX).unwrap();
        let mut tap = BridgeTap {
            events: None,
            record: sink.tap(),
            log: None,
            series: None,
        };
        tap.frame(Side::A, 10, &[1; 60]);
        tap.changes(11, &[link("delay 3ms")]);
        tap.frame(Side::B, 12, &[2; 64]);
        drop(tap);
        let summary = sink.finish().unwrap();
        assert!(summary.complete, "{summary:?}");
        let mut rec = Recording::open(&dir).unwrap();
        let got: Vec<RecordedInput> = rec.inputs().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                RecordedInput::Frame {
                    side: 0,
                    ts_ns: 10,
                    orig_len: 60,
                    data: vec![1; 60]
                },
                RecordedInput::Change {
                    at_ns: 11,
                    change: RecordedChange::Lines(vec![link("delay 3ms").to_string()])
                },
                RecordedInput::Frame {
                    side: 1,
                    ts_ns: 12,
                    orig_len: 64,
                    data: vec![2; 64]
                },
            ]
        );
    }

    #[test]
    fn a_bridge_that_never_started_leaves_no_recording() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rec");
        let sink = RecordSink::create(&dir, meta(), u64::MAX).unwrap();
        assert!(dir.is_dir());
        drop(sink);
        assert!(!dir.exists());
        let mut sink = RecordSink::create(&dir, meta(), u64::MAX).unwrap();
        let tap = sink.tap();
        drop(tap);
        sink.discard();
        assert!(!dir.exists());
    }

    #[test]
    fn the_limit_is_told_once_and_the_summary_says_incomplete() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rec");
        let mut sink = RecordSink::create(&dir, meta(), 2000).unwrap();
        let mut tap = BridgeTap {
            events: None,
            record: sink.tap(),
            log: None,
            series: None,
        };
        for k in 0..100 {
            tap.frame(Side::A, k, &[0; 100]);
        }
        let mut notices = Vec::new();
        for _ in 0..500 {
            notices.extend(sink.stop_notice());
            if !notices.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].contains("reached the record limit of 2000 bytes after")
                && notices[0].contains("goes on forwarding"),
            "{}",
            notices[0]
        );
        assert_eq!(sink.stop_notice(), None);
        drop(tap);
        let summary = sink.finish().unwrap();
        assert!(!summary.complete);
        let line = summary_line(&dir, &summary);
        assert!(
            line.contains("INCOMPLETE") && line.contains("record limit"),
            "{line}"
        );
    }
}
