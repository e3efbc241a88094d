package postgres

// SetWatchHook has b call f at each step of following the events with
// hoplock_watch, from the goroutine that follows them: "position" with the
// number it starts from, "watch" before each hoplock_watch call with the
// number it resumes after, "restart" with a number the server refused
// (HL001), "standby" on a standby, "poll" when it falls back to polling
// the holder. Set it before Watch starts.
func SetWatchHook(b *Backend, f func(step string, n int64)) { b.watchHook = f }

// SetStepDownHook has b call f after each read of step_down_to (which
// follows a renewal that reported a step-down), with the generation
// renewed, the owner read and the error. Set it before b is used.
func SetStepDownHook(b *Backend, f func(generation int64, to string, err error)) { b.stepDownHook = f }
