"""What the commands do, end to end: grading, batch grading, the student's check, the demo,
calibration, the journal's commands and their replay, the torch goldens, the bundles."""
