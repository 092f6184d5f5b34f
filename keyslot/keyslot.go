// Package keyslot maps keys to Redis Cluster hash slots: CRC16 (XMODEM,
// as Redis's crc16.c) of the key, or of its hash tag (the part between
// the first "{" and the next "}", when not empty), modulo 16384.
package keyslot

// Slots is the number of hash slots.
const Slots = 16384

var table [256]uint16

func init() {
	for i := range table {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		table[i] = crc
	}
}

// CRC16 returns the CRC16/XMODEM of b (polynomial 0x1021, initial 0).
func CRC16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ table[byte(crc>>8)^c]
	}
	return crc
}

// Of returns key's hash slot, as Redis's keyHashSlot.
func Of(key []byte) uint16 {
	return CRC16(Tag(key)) & (Slots - 1)
}

// Tag returns the part of key that is hashed: its hash tag if it has a
// non-empty one, else the whole key.
func Tag(key []byte) []byte {
	for i, c := range key {
		if c == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j == i+1 {
						return key
					}
					return key[i+1 : j]
				}
			}
			return key
		}
	}
	return key
}
