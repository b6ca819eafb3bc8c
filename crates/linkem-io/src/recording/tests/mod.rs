use super::writer::DEFAULT_QUEUE_FRAMES;
use super::*;
use crate::capture::CaptureReader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn meta(start: Start) -> RecordingMeta {
    let mut meta = RecordingMeta::new(
        7,
        1,
        65535,
        ["veth-a".to_string(), "veth-b".to_string()],
        start,
    );
    meta.options.insert("max_flows".into(), 1000.into());
    meta.options.insert("one_pass".into(), true.into());
    meta
}

/// A frame whose bytes say which it is.
fn frame_bytes(n: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| n.wrapping_mul(31).wrapping_add(k as u8))
        .collect()
}

fn frame(side: usize, ts_ns: u64, n: u8) -> RecordedInput {
    let data = frame_bytes(n, 60 + usize::from(n % 5));
    RecordedInput::Frame {
        side,
        ts_ns,
        orig_len: data.len() as u32 + u32::from(n % 3) * 100,
        data,
    }
}

fn lines(words: &[&str]) -> RecordedChange {
    RecordedChange::Lines(words.iter().map(|w| w.to_string()).collect())
}

fn feed(recorder: &mut Recorder, inputs: &[RecordedInput]) {
    for input in inputs {
        match input {
            RecordedInput::Frame {
                side,
                ts_ns,
                orig_len,
                data,
            } => recorder.frame(*side, *ts_ns, *orig_len, data),
            RecordedInput::Change { at_ns, change } => recorder.change(*at_ns, change.clone()),
        }
    }
}

fn read_all(dir: &Path) -> Result<Vec<RecordedInput>, RecordingError> {
    Recording::open(dir)?.inputs().collect()
}

fn change(at_ns: u64, change: RecordedChange) -> RecordedInput {
    RecordedInput::Change { at_ns, change }
}

/// Inputs of both sides interleaved, with changes before any frame, two at one point,
/// a reload, and one after the last frame. Stamps run backwards once: the recording
/// keeps the order the core was fed, not time order.
fn sample_inputs() -> Vec<RecordedInput> {
    vec![
        change(0, lines(&["pipe 1 config bw 1Mbit/s"])),
        frame(0, 1_000, 1),
        frame(1, 1_500, 2),
        frame(0, 1_400, 3),
        change(
            2_000,
            lines(&[
                "pipe 1 config delay 10ms",
                "add 100 pipe 1 ip from any to any",
            ]),
        ),
        change(
            2_000,
            RecordedChange::Rules(
                "pipe 2 config bw 2Mbit/s\n".into(),
                NamedFiles::from([("../lab/wide.dist".into(), "-3 0 3\n".into())]),
            ),
        ),
        frame(1, 3_000, 4),
        frame(1, 3_001, 5),
        frame(0, u64::MAX / 2, 6),
        change(9_000, lines(&[])),
    ]
}

fn new_dir(parent: &tempfile::TempDir) -> PathBuf {
    parent.path().join("rec")
}

/// A complete recording of [`sample_inputs`] to corrupt.
fn good_recording(tmp: &tempfile::TempDir) -> PathBuf {
    let dir = new_dir(tmp);
    let mut recorder =
        Recorder::create(&dir, meta(Start::Rules("pipe 1 config\n".into())), u64::MAX).unwrap();
    feed(&mut recorder, &sample_inputs());
    recorder.finish().unwrap();
    dir
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from} not in {text}");
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// The error `break_it` causes, from open or while reading the inputs.
fn error_after(break_it: impl FnOnce(&Path)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let dir = good_recording(&tmp);
    break_it(&dir);
    read_all(&dir)
        .expect_err("the corrupt recording was accepted")
        .to_string()
}

fn assert_mentions(e: &str, words: &[&str]) {
    for w in words {
        assert!(e.contains(w), "{w:?} not in: {e}");
    }
}

#[test]
fn round_trip_gives_the_inputs_back_in_order_with_their_bytes_and_sides() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let start = Start::Rules("pipe 1 config bw 10Mbit/s\nadd pipe 1 ip from any to any\n".into());
    let mut recorder = Recorder::create(&dir, meta(start.clone()), u64::MAX).unwrap();
    let inputs = sample_inputs();
    feed(&mut recorder, &inputs);
    let summary = recorder.finish().unwrap();
    assert_eq!(
        (
            summary.frames,
            summary.changes,
            summary.skipped,
            summary.complete
        ),
        (6, 4, 0, true),
        "{summary:?}"
    );
    assert_eq!(summary.stopped, None);
    let size = std::fs::metadata(dir.join(FRAMES_FILE)).unwrap().len();
    assert_eq!(summary.bytes, size);

    let mut recording = Recording::open(&dir).unwrap();
    let mut want = meta(start);
    want.complete = true;
    want.frames = 6;
    want.changes = 4;
    assert_eq!(recording.meta, want);
    let got: Vec<RecordedInput> = recording.inputs().map(Result::unwrap).collect();
    assert_eq!(got, inputs);

    // The files say what the format says.
    let changes = std::fs::read_to_string(dir.join(CHANGES_FILE)).unwrap();
    let frames_before: Vec<u64> = changes
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["frames"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(frames_before, [0, 3, 3, 6]);
    assert!(
        changes.contains(r#""rules":"change-0003.rules""#),
        "{changes}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("change-0003.rules")).unwrap(),
        "pipe 2 config bw 2Mbit/s\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(META_FILE)).unwrap()).unwrap();
    assert_eq!(json["format"], "linkem-recording");
    assert_eq!(json["version"], FORMAT_VERSION);
    assert_eq!(json["start"]["rules"], "start.rules");
    assert_eq!(json["options"]["max_flows"], 1000);
    assert_eq!(json["stopped"], serde_json::Value::Null);
    assert!(is_recording(&dir));
    assert!(!is_recording(&dir.join(FRAMES_FILE)));
    assert!(!is_recording(tmp.path()));
}

#[test]
fn frames_file_is_an_ordinary_pcapng_with_named_nanosecond_interfaces() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder =
        Recorder::create(&dir, meta(Start::Link("rate 1mbit".into())), u64::MAX).unwrap();
    recorder.frame(1, 1_234_567_891, 100, &[0xab; 60]);
    recorder.finish().unwrap();
    let bytes = std::fs::read(dir.join(FRAMES_FILE)).unwrap();
    // Any capture reader: here linkem's own, and pcap-file's for the interface options.
    let mut reader = CaptureReader::from_reader("frames", &bytes[..]).unwrap();
    let packet = reader.next_packet().unwrap().unwrap();
    assert_eq!(
        (packet.ts_ns, packet.orig_len, packet.data.len()),
        (1_234_567_891, 100, 60)
    );
    assert_eq!(reader.last_interface(), Some(1));
    let mut ng = pcap_file::pcapng::PcapNgReader::new(&bytes[..]).unwrap();
    let mut names = Vec::new();
    while let Some(block) = ng.next_block() {
        if let pcap_file::pcapng::Block::InterfaceDescription(idb) = block.unwrap() {
            assert_eq!(u32::from(idb.linktype), 1);
            assert_eq!(idb.snaplen, 65535);
            assert!(idb
                .options
                .contains(&InterfaceDescriptionOption::IfTsResol(9)));
            for o in &idb.options {
                if let InterfaceDescriptionOption::IfName(n) = o {
                    names.push(n.to_string());
                }
            }
        }
    }
    assert_eq!(names, ["veth-a", "veth-b"]);
}

fn header_bytes() -> u64 {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let recorder = Recorder::create(&dir, meta(Start::Link(String::new())), u64::MAX).unwrap();
    recorder.finish().unwrap().bytes
}

#[test]
fn reaching_the_limit_stops_recording_and_keeps_an_exact_prefix() {
    let header = header_bytes();
    // Two 60-byte frames fit (32 bytes of block each), the third does not.
    let limit = header + 2 * (32 + 60) + 50;
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder =
        Recorder::create(&dir, meta(Start::Link("rate 1mbit".into())), limit).unwrap();
    for n in 0..5u8 {
        recorder.frame(
            usize::from(n % 2),
            u64::from(n) * 10,
            60,
            &frame_bytes(n, 60),
        );
        if n == 0 {
            recorder.change(5, lines(&["pipe 1 config bw 2Mbit/s"]));
        }
    }
    let summary = recorder.finish().unwrap();
    let reason = format!("reached the record limit of {limit} bytes after 2 frames");
    assert_eq!(
        summary.stopped.as_deref(),
        Some(reason.as_str()),
        "{summary:?}"
    );
    assert_eq!(
        (summary.frames, summary.changes, summary.complete),
        (2, 1, false)
    );
    assert!(std::fs::metadata(dir.join(FRAMES_FILE)).unwrap().len() <= limit);

    let mut recording = Recording::open(&dir).unwrap();
    assert!(!recording.meta.complete);
    assert_eq!(recording.meta.stopped.as_deref(), Some(reason.as_str()));
    let got: Vec<RecordedInput> = recording.inputs().map(Result::unwrap).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        matches!(got[1], RecordedInput::Change { at_ns: 5, .. }),
        "{got:?}"
    );
}

#[test]
fn a_limit_below_the_header_records_no_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), 10).unwrap();
    recorder.frame(0, 1, 60, &[0; 60]);
    let summary = recorder.finish().unwrap();
    assert_eq!(summary.frames, 0);
    assert_eq!(
        summary.stopped.as_deref(),
        Some("reached the record limit of 10 bytes after 0 frames")
    );
}

#[test]
fn a_full_queue_skips_frames_counts_them_and_holds_changes_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let (open_gate, gate) = std::sync::mpsc::channel();
    let mut recorder = Recorder::gated(
        &dir,
        meta(Start::Link("rate 1mbit".into())),
        u64::MAX,
        2,
        gate,
    )
    .unwrap();
    // The writer waits at the gate: two frames fill the queue.
    for n in 0..5u8 {
        recorder.frame(0, u64::from(n), 60, &frame_bytes(n, 60));
    }
    assert_eq!(recorder.skipped(), 3);
    // A change is held, and a frame after it is skipped rather than overtaking it.
    recorder.change(100, lines(&["pipe 1 config bw 2Mbit/s"]));
    recorder.frame(1, 200, 60, &frame_bytes(9, 60));
    assert_eq!(recorder.skipped(), 4);
    assert_eq!(recorder.stopped(), None);
    open_gate.send(()).unwrap();
    let summary = recorder.finish().unwrap();
    assert_eq!(
        (
            summary.frames,
            summary.changes,
            summary.skipped,
            summary.complete
        ),
        (2, 1, 4, false),
        "{summary:?}"
    );
    let mut recording = Recording::open(&dir).unwrap();
    assert!(!recording.meta.complete);
    assert_eq!(recording.meta.skipped, 4);
    let got: Vec<RecordedInput> = recording.inputs().map(Result::unwrap).collect();
    assert_eq!(
        got.iter()
            .map(|i| matches!(i, RecordedInput::Frame { .. }))
            .collect::<Vec<_>>(),
        [true, true, false]
    );
}

#[test]
fn frames_beyond_the_queue_bytes_bound_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let (open_gate, gate) = std::sync::mpsc::channel();
    let mut recorder = Recorder::gated(
        &dir,
        meta(Start::Link("".into())),
        u64::MAX,
        DEFAULT_QUEUE_FRAMES,
        gate,
    )
    .unwrap();
    let big = vec![0u8; 256 * 1024];
    let fit = (writer::QUEUE_BYTES / big.len() as u64) as usize;
    for n in 0..fit + 3 {
        recorder.frame(0, n as u64, big.len() as u32, &big);
    }
    assert_eq!(recorder.skipped(), 3);
    open_gate.send(()).unwrap();
    let summary = recorder.finish().unwrap();
    assert_eq!(summary.frames, fit as u64);
}

#[test]
fn a_directory_that_holds_files_or_is_a_file_is_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep.txt"), b"mine").unwrap();
    let m = || meta(Start::Link("rate 1mbit".into()));
    let e = Recorder::create(&full, m(), u64::MAX)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("full") && e.contains("not empty") && e.contains("keep.txt"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    assert_eq!(std::fs::read(full.join("keep.txt")).unwrap(), b"mine");

    let file = tmp.path().join("file");
    std::fs::write(&file, b"mine").unwrap();
    let e = Recorder::create(&file, m(), u64::MAX)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("is a file, not a directory"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");

    let orphan = tmp.path().join("no/such/rec");
    let e = Recorder::create(&orphan, m(), u64::MAX)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("parent") && e.contains("no/such"), "{e}");

    // An empty directory is taken.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    Recorder::create(&empty, m(), u64::MAX)
        .unwrap()
        .finish()
        .unwrap();
    assert!(Recording::open(&empty).unwrap().meta.complete);
}

#[test]
fn a_link_type_beyond_16_bits_is_refused_before_anything_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut m = meta(Start::Link("".into()));
    m.link_type = 70_000;
    let e = Recorder::create(&dir, m, u64::MAX)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("link type 70000"), "{e}");
    assert!(!dir.exists());
}

#[test]
fn a_recorder_dropped_unfinished_leaves_a_readable_incomplete_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), u64::MAX).unwrap();
    let inputs = sample_inputs();
    feed(&mut recorder, &inputs);
    drop(recorder);
    let mut recording = Recording::open(&dir).unwrap();
    assert!(!recording.meta.complete);
    let got: Vec<RecordedInput> = recording.inputs().map(Result::unwrap).collect();
    assert_eq!(got, inputs);
}

#[test]
fn a_frame_longer_than_its_wire_length_stops_recording_rather_than_corrupting_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), u64::MAX).unwrap();
    recorder.frame(0, 1, 60, &[0; 60]);
    recorder.frame(0, 2, 10, &[0; 60]);
    recorder.frame(2, 3, 60, &[0; 60]);
    let summary = recorder.finish().unwrap();
    assert_eq!(summary.frames, 1);
    let stopped = summary.stopped.unwrap();
    assert!(
        stopped.contains("frame 2 has 60 captured bytes"),
        "{stopped}"
    );
    assert_eq!(read_all(&dir).unwrap().len(), 1);

    let dir = tmp.path().join("side");
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), u64::MAX).unwrap();
    recorder.frame(2, 3, 60, &[0; 60]);
    let stopped = recorder.finish().unwrap().stopped.unwrap();
    assert!(stopped.contains("frame 1 is on side 2"), "{stopped}");
}

#[test]
fn parsed_metadata_writes_back_the_same() {
    let m = meta(Start::Rules("x".into()));
    let text = wire::MetaFile::from_meta(&m, START_RULES_FILE, &Default::default()).to_text();
    let parsed = wire::parse_meta("recording.json", &text).unwrap();
    assert_eq!(parsed.to_text(), text);
    assert_eq!(parsed.into_meta(Some("x".into()), NamedFiles::new()), m);
}

#[test]
fn sides_with_different_links_keep_both_words() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let start = Start::Links(["delay 10ms".into(), "rate 1Mbit/s".into()]);
    let recorder = Recorder::create(&dir, meta(start.clone()), u64::MAX).unwrap();
    recorder.finish().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(META_FILE)).unwrap()).unwrap();
    assert_eq!(
        json["start"]["links"],
        serde_json::json!(["delay 10ms", "rate 1Mbit/s"])
    );
    assert_eq!(Recording::open(&dir).unwrap().meta.start, start);
    // One link for both sides stays as version 1 first wrote it.
    let m = meta(Start::Link("delay 1ms".into()));
    let text = wire::MetaFile::from_meta(&m, START_RULES_FILE, &Default::default()).to_text();
    assert!(text.contains(r#""link": "delay 1ms""#), "{text}");
}

#[test]
fn a_watch_sees_the_limit_reached_from_another_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let limit = header_bytes() + 32 + 60;
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), limit).unwrap();
    let watch = recorder.watch();
    assert_eq!(watch.stopped(), None);
    for n in 0..3u8 {
        recorder.frame(0, u64::from(n), 60, &frame_bytes(n, 60));
    }
    let reason = format!("reached the record limit of {limit} bytes after 1 frames");
    let seen = std::thread::spawn(move || {
        for _ in 0..500 {
            if let Some(r) = watch.stopped() {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    })
    .join()
    .unwrap();
    assert_eq!(seen.as_deref(), Some(reason.as_str()));
    assert_eq!(recorder.finish().unwrap().stopped, Some(reason));
}

#[test]
fn a_discarded_recording_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    // A directory it made goes.
    let dir = new_dir(&tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Rules("x\n".into())), u64::MAX).unwrap();
    recorder.frame(0, 1, 60, &[0; 60]);
    recorder.change(
        2,
        RecordedChange::Rules("y\n".into(), NamedFiles::from([("p".into(), "z\n".into())])),
    );
    recorder.discard();
    assert!(!dir.exists());
    // An empty directory the user gave stays, empty.
    let given = tmp.path().join("given");
    std::fs::create_dir(&given).unwrap();
    let recorder = Recorder::create(&given, meta(Start::Link("".into())), u64::MAX).unwrap();
    recorder.discard();
    assert!(given.is_dir());
    assert_eq!(std::fs::read_dir(&given).unwrap().count(), 0);
}

/// A start that read two files of one content and a third: one copy per content, the
/// map by the name as written, and the texts back from the copies.
fn meta_with_files() -> RecordingMeta {
    let mut m = meta(Start::Link(
        "delay 2ms 1ms distribution ../t/wide.dist".into(),
    ));
    m.files = NamedFiles::from([
        ("../t/wide.dist".into(), "-3 0 3\n".into()),
        ("same.dist".into(), "-3 0 3\n".into()),
        ("/abs/a b.trace".into(), "1\n2\n".into()),
    ]);
    m
}

#[test]
fn the_files_a_run_read_are_copied_once_each_and_read_back_from_the_copies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let m = meta_with_files();
    let mut recorder = Recorder::create(&dir, m.clone(), u64::MAX).unwrap();
    let reload = NamedFiles::from([
        ("same.dist".into(), "-3 0 3\n".into()),
        ("p".into(), "name p\n".into()),
    ]);
    recorder.change(5, RecordedChange::Rules("x\n".into(), reload.clone()));
    recorder.finish().unwrap();
    let mut copies: Vec<String> = std::fs::read_dir(dir.join(FILES_DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    copies.sort();
    assert_eq!(copies, ["0-wide.dist", "1-a_b.trace", "2-p"]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(META_FILE)).unwrap()).unwrap();
    assert_eq!(json["files"]["same.dist"]["copy"], "files/0-wide.dist");
    assert_eq!(json["files"]["../t/wide.dist"]["bytes"], 7);
    let mut rec = Recording::open(&dir).unwrap();
    assert_eq!(rec.meta.files, m.files);
    assert_eq!(rec.meta.version, FORMAT_VERSION);
    let got: Vec<RecordedInput> = rec.inputs().map(Result::unwrap).collect();
    assert_eq!(
        got,
        [change(5, RecordedChange::Rules("x\n".into(), reload))]
    );
}

#[test]
fn a_missing_or_altered_copy_is_refused_naming_it() {
    for (what, break_it) in [
        (
            "cannot be read",
            (|p: &Path| std::fs::remove_file(p).unwrap()) as fn(&Path),
        ),
        ("altered", |p: &Path| std::fs::write(p, "-3 0 4\n").unwrap()),
        ("altered", |p: &Path| {
            std::fs::write(p, "-3 0 3\n\n").unwrap()
        }),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = new_dir(&tmp);
        Recorder::create(&dir, meta_with_files(), u64::MAX)
            .unwrap()
            .finish()
            .unwrap();
        break_it(&dir.join("files/0-wide.dist"));
        let e = Recording::open(&dir).err().unwrap().to_string();
        assert_mentions(&e, &["files/0-wide.dist", "../t/wide.dist", what]);
    }
}

#[test]
fn files_beyond_the_limit_are_refused_at_start_and_stop_a_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let e = Recorder::create(&dir, meta_with_files(), 10)
        .err()
        .unwrap()
        .to_string();
    assert_mentions(
        &e,
        &["cannot record", "11 bytes", "record limit of 10 bytes"],
    );
    assert!(!dir.exists(), "nothing is left of a refused recording");
    let limit = header_bytes() + 11 + 5;
    let mut recorder = Recorder::create(&dir, meta_with_files(), limit).unwrap();
    let big = NamedFiles::from([("big".into(), "x".repeat(6))]);
    recorder.change(1, RecordedChange::Rules("y\n".into(), big));
    let summary = recorder.finish().unwrap();
    assert!(!summary.complete);
    assert_mentions(
        summary.stopped.as_deref().unwrap_or(""),
        &["reached the record limit", "big", "6 bytes"],
    );
}

#[test]
fn a_version_1_recording_without_files_still_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    Recorder::create(&dir, meta(Start::Link("delay 1ms".into())), u64::MAX)
        .unwrap()
        .finish()
        .unwrap();
    edit(&dir.join(META_FILE), "\"version\": 3", "\"version\": 1");
    let rec = Recording::open(&dir).unwrap();
    assert_eq!(rec.meta.version, 1);
    assert!(rec.meta.files.is_empty());
    // Files in a version-1 recording are not the format it claims.
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    Recorder::create(&dir, meta_with_files(), u64::MAX)
        .unwrap()
        .finish()
        .unwrap();
    edit(&dir.join(META_FILE), "\"version\": 3", "\"version\": 1");
    let e = Recording::open(&dir).err().unwrap().to_string();
    assert_mentions(&e, &["recording.json", "version 1"]);
}

#[test]
fn the_start_instant_is_kept_at_once_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder =
        Recorder::create(&dir, meta(Start::Link("delay 1ms".into())), u64::MAX).unwrap();
    recorder.record_start(1_000_000_123);
    // Before finish: a run killed now still leaves its start.
    let text = std::fs::read_to_string(dir.join(META_FILE)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["start_ns"], 1_000_000_123u64);
    assert_eq!(json["complete"], false);
    recorder.finish().unwrap();
    let rec = Recording::open(&dir).unwrap();
    assert_eq!(rec.meta.start_ns, Some(1_000_000_123));
    // A recording without it (a writer of version 2) starts at the first frame.
    let plain = tmp.path().join("plain");
    Recorder::create(&plain, meta(Start::Link("delay 1ms".into())), u64::MAX)
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(Recording::open(&plain).unwrap().meta.start_ns, None);
}

#[test]
fn a_start_instant_in_an_older_version_is_refused() {
    let m = wire::MetaFile::from_meta(
        &meta(Start::Link("delay 1ms".into())),
        START_RULES_FILE,
        &Default::default(),
    );
    let mut json: serde_json::Value = serde_json::from_str(&m.to_text()).unwrap();
    json["version"] = 2.into();
    json["start_ns"] = 5.into();
    let e = wire::parse_meta("recording.json", &json.to_string()).unwrap_err();
    assert!(e.to_string().contains("\"start_ns\" in a version 2"), "{e}");
}

mod damaged;
