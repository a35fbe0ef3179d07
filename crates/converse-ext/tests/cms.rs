//! The manual's master-slave example (`examples/cms.rs`) gives the
//! manual's answers on one PE and on four (two nodes of two PEs); across
//! processes, `ext_cms` in `convrun`'s multi-process tests runs it.
#[path = "../examples/cms.rs"]
mod example;

/// The lines PE 0 prints, in order but for the consumer's (which come as
/// the responses do).
fn expected() -> (Vec<String>, Vec<String>) {
    let mut lines = vec!["manager inited".to_string()];
    for i in 0..3 {
        for j in 0..5 {
            let a = (10 * i + j) as f32;
            lines.push(format!("Response {j} is: {:.6}", a * a));
        }
        lines.push(format!("End of phase {i}"));
    }
    lines.push("Now the consumerFunction mode".to_string());
    let consumer = (0..3)
        .map(|i| {
            let a = (5 + i) as f32;
            format!("consumer: response with refnum = {i} is {:.6}", a * a)
        })
        .collect();
    (lines, consumer)
}

fn run(args: &[&str]) {
    example::LINES.lock().unwrap().clear();
    let code = converse::Converse::new()
        .args(args.iter().copied())
        .run(example::start)
        .expect("the job starts");
    assert_eq!(code, 0);
    let got = example::LINES.lock().unwrap().clone();
    let (ordered, consumer) = expected();
    assert_eq!(got[..ordered.len()], ordered[..], "{args:?}");
    let mut tail = got[ordered.len()..].to_vec();
    tail.sort();
    assert_eq!(tail, consumer, "{args:?}");
}

#[test]
fn the_manuals_example_gives_the_manuals_answers() {
    run(&["cms", "+p", "1"]);
    run(&["cms", "+p", "4", "++ppn", "2"]);
}
