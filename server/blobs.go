package server

func (s *Server) blobRoutes() {}
