// Package httplimit is net/http middleware limiting requests through
// cellserver.
package httplimit
