#include "colibri/auth/grpc_auth.h"

#include <future>

#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

namespace colibri::auth {
namespace {

// Answers every method with the result of Authenticate: OK carrying the identity in the
// trailing metadata, or the error.
class EchoIdentity final : public grpc::CallbackGenericService {
 public:
  explicit EchoIdentity(const ApiKeys* keys) : keys_(keys) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      Reactor(const ApiKeys* keys, grpc::GenericCallbackServerContext* ctx) {
        auto who = Authenticate(keys, *ctx);
        if (who.ok()) ctx->AddTrailingMetadata("identity", *who);
        Finish(who.ok() ? grpc::Status::OK
                        : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                       std::string(who.status().message())));
      }
      void OnDone() override { delete this; }
    };
    return new Reactor(keys_, ctx);
  }

 private:
  const ApiKeys* keys_;
};

class GrpcAuthTest : public ::testing::Test {
 protected:
  void Start(const ApiKeys* keys) {
    service_ = std::make_unique<EchoIdentity>(keys);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterCallbackGenericService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = std::make_unique<grpc::GenericStub>(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  // Calls a method with `authorization` metadata (none when empty); returns the status and
  // the identity the server saw.
  std::pair<grpc::Status, std::string> Call(const std::string& authorization) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stub_->UnaryCall(&ctx, "/colibri.test.Any/Method", grpc::StubOptions(), &request, &response,
                     [&done](grpc::Status s) { done.set_value(std::move(s)); });
    grpc::Status st = done.get_future().get();
    std::string identity;
    auto it = ctx.GetServerTrailingMetadata().find("identity");
    if (it != ctx.GetServerTrailingMetadata().end())
      identity.assign(it->second.data(), it->second.size());
    return {st, identity};
  }
  std::unique_ptr<EchoIdentity> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(GrpcAuthTest, KeysFromMetadata) {
  auto keys = ApiKeys::Load({"k-one", "k-two"}, "");
  ASSERT_TRUE(keys.ok());
  Start(&*keys);
  auto [none, none_id] = Call("");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call("Bearer wrong").first.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call("k-one").first.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto [one, one_id] = Call("Bearer k-one");
  EXPECT_TRUE(one.ok()) << one.error_message();
  EXPECT_EQ(one_id, "key-1");
  auto [two, two_id] = Call("Bearer k-two");
  EXPECT_TRUE(two.ok()) << two.error_message();
  EXPECT_EQ(two_id, "key-2");
}

TEST_F(GrpcAuthTest, NoKeysIsOpen) {
  ApiKeys keys;
  Start(&keys);
  auto [st, id] = Call("");
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(id, "");
}

}  // namespace
}  // namespace colibri::auth
