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
fn corrupt_metadata_gives_errors_naming_file_and_problem() {
    let e = error_after(|d| std::fs::remove_file(d.join(META_FILE)).unwrap());
    assert_mentions(&e, &["recording.json", "missing", "not a linkem recording"]);
    let e = error_after(|d| std::fs::write(d.join(META_FILE), "{\"format\":").unwrap());
    assert_mentions(&e, &["recording.json", "not JSON"]);
    let e = error_after(|d| std::fs::write(d.join(META_FILE), "[1]").unwrap());
    assert_mentions(&e, &["recording.json", "not a JSON object"]);
    let e = error_after(|d| edit(&d.join(META_FILE), "linkem-recording", "pcap"));
    assert_mentions(
        &e,
        &[
            "recording.json",
            "\"format\" is not \"linkem-recording\"",
            "not a linkem recording",
        ],
    );
    let e = error_after(|d| edit(&d.join(META_FILE), "\"version\": 3", "\"version\": 4"));
    assert_mentions(
        &e,
        &[
            "recording.json",
            "\"version\" is not a format version",
            "reads: 1 to 3",
        ],
    );
    let e = error_after(|d| edit(&d.join(META_FILE), "\"seed\": 7,", ""));
    assert_mentions(&e, &["recording.json", "missing field `seed`"]);
    let e = error_after(|d| {
        edit(
            &d.join(META_FILE),
            "\"seed\": 7,",
            "\"seed\": 7, \"sneed\": 1,",
        )
    });
    assert_mentions(
        &e,
        &[
            "recording.json",
            "unknown field <7 bytes of the file>, expected one of `format`",
        ],
    );
    let e = error_after(|d| {
        edit(
            &d.join(META_FILE),
            "\"start.rules\"",
            "\"../../etc/passwd\"",
        )
    });
    assert_mentions(
        &e,
        &["recording.json", "start rules", "not a plain file name"],
    );
    let e = error_after(|d| std::fs::remove_file(d.join("start.rules")).unwrap());
    assert_mentions(&e, &["start.rules"]);
    let e = error_after(|d| edit(&d.join(META_FILE), "\"frames\": 6", "\"frames\": 7"));
    assert_mentions(&e, &["recording.json", "says 7 frames", "holds 6"]);
    let e = error_after(|d| edit(&d.join(META_FILE), "\"changes\": 4", "\"changes\": 5"));
    assert_mentions(&e, &["recording.json", "says 5 changes", "holds 4"]);
    let e = error_after(|d| edit(&d.join(META_FILE), "\"link_type\": 1", "\"link_type\": 101"));
    assert_mentions(&e, &["frames.pcapng", "link type 1", "says 101"]);
}

#[test]
fn corrupt_changes_give_errors_naming_the_line() {
    let changes = |d: &Path| d.join(CHANGES_FILE);
    let e = error_after(|d| edit(&changes(d), "{\"frames\":3,", "{\"frames\":3"));
    assert_mentions(&e, &["changes.jsonl line 2", "not a change"]);
    let e = error_after(|d| edit(&changes(d), "\"frames\":6", "\"frames\":9"));
    assert_mentions(
        &e,
        &["changes.jsonl line 4", "after 9 frames", "holds only 6"],
    );
    let e = error_after(|d| edit(&changes(d), "\"frames\":6", "\"frames\":2"));
    assert_mentions(
        &e,
        &["changes.jsonl line 4", "is 2 but line 3 before it says 3"],
    );
    let e = error_after(|d| edit(&changes(d), "change-0003.rules", "/etc/shadow"));
    assert_mentions(&e, &["changes.jsonl line 3", "not a plain file name"]);
    let e = error_after(|d| std::fs::remove_file(d.join("change-0003.rules")).unwrap());
    assert_mentions(&e, &["change-0003.rules"]);
    let e = error_after(|d| {
        edit(
            &changes(d),
            "\"rules\":\"change-0003.rules\"",
            "\"lines\":[],\"rules\":\"x\"",
        )
    });
    assert_mentions(&e, &["changes.jsonl line 3", "both"]);
    let e = error_after(|d| edit(&changes(d), ",\"rules\":\"change-0003.rules\"", ""));
    assert_mentions(&e, &["changes.jsonl line 3", "neither"]);
    let e = error_after(|d| std::fs::remove_file(changes(d)).unwrap());
    assert_mentions(&e, &["changes.jsonl"]);
}

/// Writes `frames.pcapng` by hand: `interfaces` interfaces of link type 1, and packets
/// (interface, captured bytes, original length).
fn write_frames(path: &Path, interfaces: usize, packets: &[(u32, usize, u32)]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapNgWriter::with_endianness(file, Endianness::Little).unwrap();
    for _ in 0..interfaces {
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        })
        .unwrap();
    }
    for &(interface_id, caplen, original_len) in packets {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id,
            timestamp: Duration::from_nanos(5),
            original_len,
            data: Cow::Owned(vec![0; caplen]),
            options: vec![],
        })
        .unwrap();
    }
}

#[test]
fn corrupt_frames_give_errors_naming_the_file() {
    let frames = |d: &Path| d.join(FRAMES_FILE);
    let six = |side| vec![(side, 60, 60); 6];
    // A third interface, and a frame on it.
    let e = error_after(|d| {
        let mut p = six(0);
        p[4].0 = 2;
        write_frames(&frames(d), 3, &p)
    });
    assert_mentions(&e, &["frames.pcapng", "frame 5 is on interface 2"]);
    let e = error_after(|d| {
        let mut p = six(1);
        p[1] = (0, 61, 60);
        write_frames(&frames(d), 2, &p)
    });
    assert_mentions(
        &e,
        &[
            "frames.pcapng",
            "captured length 61 exceeds the original length 60",
        ],
    );
    let e = error_after(|d| {
        let len = std::fs::metadata(frames(d)).unwrap().len();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(frames(d))
            .unwrap();
        f.set_len(len - 10).unwrap();
    });
    assert_mentions(&e, &["frames.pcapng", "truncated enhanced packet block"]);
    let e = error_after(|d| std::fs::write(frames(d), b"nope").unwrap());
    assert_mentions(&e, &["frames.pcapng", "not a pcap or pcapng file"]);
    let e = error_after(|d| std::fs::remove_file(frames(d)).unwrap());
    assert_mentions(&e, &["frames.pcapng", "No such file"]);
}

#[test]
fn opening_something_that_is_not_a_recording_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Recording::open(&tmp.path().join("absent"))
        .err()
        .unwrap()
        .to_string();
    assert_mentions(&e, &["absent", "not a directory holding a recording"]);
    let e = Recording::open(tmp.path()).err().unwrap().to_string();
    assert_mentions(&e, &["recording.json", "missing"]);
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

/// A FIFO in place of `frames.pcapng` is refused at open, where opening it to
/// read would wait for a writer for ever.
#[test]
fn a_fifo_as_frames_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = good_recording(&tmp);
    let frames = dir.join(FRAMES_FILE);
    std::fs::remove_file(&frames).unwrap();
    let c = std::ffi::CString::new(frames.to_str().unwrap()).unwrap();
    // Safety: mkfifo reads a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Recording::open(&dir).map(|_| ()).map_err(|e| e.to_string()));
    });
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("Recording::open still waits on the FIFO after 10 s")
        .unwrap_err();
    assert!(e.contains("frames.pcapng") && e.contains("FIFO"), "{e}");
}

/// An unfinished recording (its run killed, or stopped by a full disk) of
/// [`sample_inputs`], to cut.
fn unfinished_recording(tmp: &tempfile::TempDir) -> PathBuf {
    let dir = new_dir(tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), u64::MAX).unwrap();
    feed(&mut recorder, &sample_inputs());
    drop(recorder);
    dir
}

/// The byte offset where each pcapng block ends, and whether it holds a packet.
fn block_ends(bytes: &[u8]) -> Vec<(usize, bool)> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let type_ = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += len;
        ends.push((at, type_ == 6));
    }
    ends
}

/// `frames.pcapng` cut at every byte past its header: the frames whole before
/// the cut replay, then the recording ends with a note naming the file, the
/// offset and the frame, and the changes after the cut are left out, said so.
#[test]
fn an_unfinished_recording_cut_inside_a_frame_replays_its_whole_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = unfinished_recording(&tmp);
    let frames = std::fs::read(dir.join(FRAMES_FILE)).unwrap();
    let ends = block_ends(&frames);
    assert_eq!(ends.last().unwrap().0, frames.len());
    let header_end = ends
        .iter()
        .take_while(|(_, packet)| !packet)
        .last()
        .unwrap()
        .0;
    let inputs = sample_inputs();
    for cut in header_end..frames.len() {
        std::fs::write(dir.join(FRAMES_FILE), &frames[..cut]).unwrap();
        let mut rec = Recording::open(&dir).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let got: Vec<RecordedInput> = rec
            .inputs()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let whole = ends.iter().filter(|(end, p)| *p && *end <= cut).count();
        let got_frames = got
            .iter()
            .filter(|i| matches!(i, RecordedInput::Frame { .. }))
            .count();
        assert_eq!(got_frames, whole, "cut {cut}");
        assert_eq!(got, inputs[..got.len()], "cut {cut}: a prefix of the run");
        let notes = rec.cut_short().join("\n");
        let mid_block = !ends.iter().any(|(end, _)| *end == cut);
        if mid_block {
            assert!(
                notes.contains("frames.pcapng: truncated")
                    && notes.contains("byte offset")
                    && notes.contains(&format!("{whole} frames before it are replayed")),
                "cut {cut}: {notes}"
            );
        }
        let changes_after = inputs[got.len()..]
            .iter()
            .any(|i| matches!(i, RecordedInput::Change { .. }));
        assert_eq!(
            changes_after,
            notes.contains("not replayed"),
            "cut {cut}: {notes}"
        );
    }
}

/// `changes.jsonl` cut at every byte: the whole lines replay, the cut one is
/// named with its offset, and every frame still replays.
#[test]
fn an_unfinished_recording_cut_inside_a_change_replays_its_whole_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = unfinished_recording(&tmp);
    let changes = std::fs::read_to_string(dir.join(CHANGES_FILE)).unwrap();
    for cut in 0..changes.len() {
        std::fs::write(dir.join(CHANGES_FILE), &changes[..cut]).unwrap();
        let mut rec = Recording::open(&dir).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let got: Vec<RecordedInput> = rec
            .inputs()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let whole_lines = changes[..cut].matches('\n').count();
        let got_changes = got
            .iter()
            .filter(|i| matches!(i, RecordedInput::Change { .. }))
            .count();
        // A last line cut exactly before its newline still parses.
        let last_parses = changes.as_bytes()[cut] == b'\n' && !changes[..cut].ends_with('\n');
        assert_eq!(
            got_changes,
            whole_lines + usize::from(last_parses),
            "cut {cut}"
        );
        assert_eq!(got.len() - got_changes, 6, "cut {cut}: every frame");
        let notes = rec.cut_short().join("\n");
        let mid_line = !changes[..cut].ends_with('\n') && cut > 0 && !last_parses;
        assert_eq!(
            notes.contains("is cut short in line"),
            mid_line,
            "cut {cut}: {notes}"
        );
    }
}

/// A change line cut inside a character (its text is not ASCII) is a cut like
/// any other, not a file that is "not UTF-8".
#[test]
fn an_unfinished_recording_cut_inside_a_character_replays_the_changes_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), u64::MAX).unwrap();
    recorder.change(1, lines(&["link a-to-b delay 1ms"]));
    recorder.change(2, lines(&["link both delay 2ms é"]));
    drop(recorder);
    let changes = std::fs::read(dir.join(CHANGES_FILE)).unwrap();
    let at = changes
        .windows(2)
        .position(|w| w == "é".as_bytes())
        .unwrap();
    std::fs::write(dir.join(CHANGES_FILE), &changes[..at + 1]).unwrap();
    let mut rec = Recording::open(&dir).unwrap();
    let got: Vec<RecordedInput> = rec.inputs().collect::<Result<_, _>>().unwrap();
    assert_eq!(got, [change(1, lines(&["link a-to-b delay 1ms"]))]);
    assert!(
        rec.cut_short()[0].contains("cut short in line 2"),
        "{:?}",
        rec.cut_short()
    );
}

/// A complete recording cut inside a frame is an error, not a shorter replay:
/// it says it holds more, and the error names the file and the offset.
#[test]
fn a_complete_recording_cut_inside_a_frame_is_an_error_naming_the_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = good_recording(&tmp);
    let frames = std::fs::read(dir.join(FRAMES_FILE)).unwrap();
    std::fs::write(dir.join(FRAMES_FILE), &frames[..frames.len() - 3]).unwrap();
    let e = read_all(&dir).unwrap_err().to_string();
    assert!(
        e.contains("frames.pcapng: truncated enhanced packet block at byte offset"),
        "{e}"
    );
}

/// The writer stops before `changes.jsonl` would pass what a replay reads, and
/// what it wrote replays.
#[test]
fn changes_stop_at_the_size_a_replay_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = new_dir(&tmp);
    let mut recorder = Recorder::create(&dir, meta(Start::Link("".into())), u64::MAX).unwrap();
    let line = "x".repeat(1 << 20);
    let per_change = (MAX_CHANGES_BYTES >> 20) + 1;
    for k in 0..per_change + 2 {
        recorder.change(k, RecordedChange::Lines(vec![line.clone()]));
    }
    let summary = recorder.finish().unwrap();
    let stopped = summary.stopped.clone().expect("stopped at the bound");
    assert!(
        stopped.contains("changes.jsonl reached 67108864 bytes, the most a replay reads"),
        "{stopped}"
    );
    assert!(
        summary.changes > 0 && summary.changes < per_change,
        "{summary:?}"
    );
    let got = read_all(&dir).unwrap();
    assert_eq!(got.len() as u64, summary.changes);
}
