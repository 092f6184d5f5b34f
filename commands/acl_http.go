package commands

// CheckUser is for a listener other than the RESP port that accepts the
// server's ACL users (the metrics port, server.Config.MetricsACL):
// authenticated reports whether name and pass are the credentials of an
// enabled user that has a password (as AUTH checks them, digests compared
// in constant time; a nopass user is refused, since any password would
// do), and permitted whether that user may run cmd with no argument and
// no key (e.g. "info"). Nothing is logged: there is no client to name in
// ACL LOG.
func (s *Service) CheckUser(name, pass, cmd string) (authenticated, permitted bool) {
	u := s.checkCredentials([]byte(name), []byte(pass))
	if u == nil {
		return false, false
	}
	st := u.state.Load()
	if st.nopass {
		return false, false
	}
	sp := s.aclLookup(cmd)
	if sp == nil {
		return true, false
	}
	res, _ := st.check(sp, [][]byte{[]byte(cmd)}, nil)
	return true, res == aclAllowed
}
