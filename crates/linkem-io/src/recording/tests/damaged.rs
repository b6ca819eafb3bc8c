//! Damaged recordings: corrupt metadata, changes and frames, files that are no
//! recording, and recordings cut short, each refused or read as far as it is whole
//! with an error naming the file and the place.

use super::*;

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
