// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t minmax_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status minmax_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "minmax: BOOTSTRAP"}; }
status minmax_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "minmax: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
