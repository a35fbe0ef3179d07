//! The CPM scanner (being written).
fn main() {
    eprintln!("cpm: not built yet");
    std::process::exit(1);
}
