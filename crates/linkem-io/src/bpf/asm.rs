//! Programs with named jump targets: a jump is written with the label it goes
//! to, and its offset is filled in once the whole program is known, so a
//! program can grow without recounting every jump by hand.

use super::BpfInsn;

/// A program being written: instructions, labels, and the jumps to patch.
#[derive(Default)]
pub struct Asm {
    insns: Vec<BpfInsn>,
    labels: Vec<(&'static str, usize)>,
    jumps: Vec<(usize, &'static str)>,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends instructions.
    pub fn ops(&mut self, insns: impl IntoIterator<Item = BpfInsn>) -> &mut Self {
        self.insns.extend(insns);
        self
    }

    /// Names the next instruction `name`.
    pub fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.push((name, self.insns.len()));
        self
    }

    /// Appends a jump (any conditional or `ja`, its offset left 0) to `to`.
    pub fn jump(&mut self, insn: BpfInsn, to: &'static str) -> &mut Self {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(insn);
        self
    }

    /// The instructions, each jump's offset counted from the instruction
    /// after it.
    ///
    /// # Panics
    /// On a jump to a label never placed, or placed twice, or further than
    /// an offset holds: mistakes in the program's text, which the unit
    /// tests load every program to catch.
    pub fn finish(mut self) -> Vec<BpfInsn> {
        for &(at, to) in &self.jumps {
            let mut places = self.labels.iter().filter(|(n, _)| *n == to);
            let target = match (places.next(), places.next()) {
                (Some(&(_, t)), None) => t,
                _ => panic!("label {to:?} must be placed exactly once"),
            };
            let off = target as i64 - at as i64 - 1;
            self.insns[at].off = i16::try_from(off).expect("jump within 32767 instructions");
        }
        self.insns
    }
}
