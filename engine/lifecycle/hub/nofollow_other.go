//go:build !unix

package hub

// oNoFollow is 0 where open(2) has no O_NOFOLLOW; the Lstat checks still apply.
const oNoFollow = 0
