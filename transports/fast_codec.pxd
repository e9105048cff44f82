# The compiled plain-message codec's entry points, for runtime/fast_mailbox.pyx to call in C.

cpdef list encode_frames(msg)
cpdef object decode(data, buffers=*)
cpdef list decode_many(datas)
