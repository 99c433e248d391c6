// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t topk_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status topk_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "topk: BOOTSTRAP"}; }
status topk_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "topk: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
