package quant

import (
	"fmt"
	"sync"
	"math/rand/v2"
	"testing"
)

func benchSerial(b *testing.B, rows, cols, bits int) {
	rng := rand.New(rand.NewPCG(1, 1))
	m := randMatrix(rng, rows, cols, bits)
	in := NewInput(cols)
	in.Set(randVec(rng, cols))
	dst := make([]float32, rows)
	b.SetBytes(int64(len(m.Words)*4 + len(m.Scales)*4))
	for range b.N {
		m.MulVecRange(dst, in, 0, rows)
	}
}

func BenchmarkSerialQ4L2(b *testing.B)  { benchSerial(b, 256, 2048, 4) }
func BenchmarkSerialQ4Mem(b *testing.B) { benchSerial(b, 65536, 2048, 4) }
func BenchmarkSerialQ8L2(b *testing.B)  { benchSerial(b, 128, 2048, 8) }

func BenchmarkSerialQ4MemRow1(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	rows, cols := 65536, 2048
	m := randMatrix(rng, rows, cols, 4)
	in := NewInput(cols)
	in.Set(randVec(rng, cols))
	dst := make([]float32, rows)
	b.SetBytes(int64(len(m.Words)*4 + len(m.Scales)*4))
	G := cols / 64
	for range b.N {
		for r := range rows {
			q4MulAsm(&dst[r], &m.Words[r*G*8], &m.Scales[r*G], &m.Biases[r*G], &in.xp[0], &in.gsum[0], 1, G)
		}
	}
}

var sink uint64

func BenchmarkReadSum(b *testing.B) {
	buf := make([]uint64, 64<<20)
	for i := range buf {
		buf[i] = uint64(i)
	}
	b.SetBytes(int64(len(buf) * 8))
	b.ResetTimer()
	for range b.N {
		var s0, s1, s2, s3 uint64
		for i := 0; i < len(buf); i += 4 {
			s0 += buf[i]
			s1 += buf[i+1]
			s2 += buf[i+2]
			s3 += buf[i+3]
		}
		sink += s0 + s1 + s2 + s3
	}
}

func BenchmarkCopy1(b *testing.B) {
	src := make([]byte, 256<<20)
	dst := make([]byte, 256<<20)
	for i := range src {
		src[i], dst[i] = byte(i), byte(i)
	}
	b.SetBytes(int64(2 * len(src)))
	b.ResetTimer()
	for range b.N {
		copy(dst, src)
	}
}

func benchRow1(b *testing.B, rows int) {
	rng := rand.New(rand.NewPCG(1, 1))
	cols := 2048
	m := randMatrix(rng, rows, cols, 4)
	in := NewInput(cols)
	in.Set(randVec(rng, cols))
	dst := make([]float32, rows)
	b.SetBytes(int64(len(m.Words)*4 + len(m.Scales)*4))
	G := cols / 64
	for range b.N {
		for r := range rows {
			q4MulAsm(&dst[r], &m.Words[r*G*8], &m.Scales[r*G], &m.Biases[r*G], &in.xp[0], &in.gsum[0], 1, G)
		}
	}
}
func BenchmarkSerialQ4L2Row1(b *testing.B) { benchRow1(b, 256) }

func BenchmarkComputeScaling(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	rows, cols := 512, 2048
	m := randMatrix(rng, rows, cols, 4)
	in := NewInput(cols)
	in.Set(randVec(rng, cols))
	for _, par := range []int{1, 2} {
		b.Run(fmt.Sprint(par), func(b *testing.B) {
			b.SetBytes(int64(par * (len(m.Words)*4 + len(m.Scales)*4)))
			var wg sync.WaitGroup
			for p := range par {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dst := make([]float32, rows)
					_ = p
					for range b.N {
						m.MulVecRange(dst, in, 0, rows)
					}
				}()
			}
			wg.Wait()
		})
	}
}

func BenchmarkReadScaling(b *testing.B) {
	buf := make([]uint64, 32<<20)
	for i := range buf {
		buf[i] = uint64(i)
	}
	for _, par := range []int{1, 2} {
		b.Run(fmt.Sprint(par), func(b *testing.B) {
			b.SetBytes(int64(len(buf) * 8))
			for range b.N {
				var wg sync.WaitGroup
				n := len(buf) / par
				for p := range par {
					wg.Add(1)
					go func() {
						defer wg.Done()
						part := buf[p*n : (p+1)*n]
						var s0, s1, s2, s3 uint64
						for i := 0; i < len(part); i += 4 {
							s0 += part[i]
							s1 += part[i+1]
							s2 += part[i+2]
							s3 += part[i+3]
						}
						sink += s0 + s1 + s2 + s3
					}()
				}
				wg.Wait()
			}
		})
	}
}
