fn main() {
    println!("cohort-coordinator: not wired yet");
}
