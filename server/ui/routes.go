package ui

// routes registers the pages besides the thread list and the login.
func (u *UI) routes() {
	u.mux.HandleFunc("GET /ui/thread", u.thread)
}
