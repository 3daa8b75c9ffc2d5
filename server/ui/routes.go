package ui

// routes registers the pages besides the thread list and the login.
func (u *UI) routes() {
	u.mux.HandleFunc("GET /ui/thread", u.thread)
	u.mux.HandleFunc("GET /ui/checkpoint", u.checkpoint)
	u.mux.HandleFunc("GET /ui/file", u.file)
	u.mux.HandleFunc("GET /ui/raw", u.raw)
	u.mux.HandleFunc("GET /ui/artifact", u.artifact)
	u.mux.HandleFunc("GET /ui/diff", u.diff)
	u.mux.HandleFunc("GET /ui/storage", u.storage)
	u.mux.HandleFunc("POST /ui/storage/gc", u.post(u.gcPlan))
}
