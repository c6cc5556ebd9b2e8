//! Placeholder until the listing page lands (helper `path`).
pub(crate) struct Entry {
    pub name: Vec<u8>,
    pub dir: bool,
    pub size: Option<u64>,
    pub mtime: Option<i64>,
}
pub(crate) fn html(_path: &[u8], entries: &mut [Entry], out: &mut Vec<u8>) {
    for e in entries.iter() {
        out.extend_from_slice(&e.name);
        out.push(b'\n');
    }
}
pub(crate) fn json(entries: &mut [Entry], out: &mut Vec<u8>) {
    for e in entries.iter() {
        out.extend_from_slice(b"\"");
        out.extend_from_slice(&e.name);
        out.extend_from_slice(b"\"\n");
    }
}
