// One gRPC-Web transport to the coordinator that served the page, with the
// tab's token on every call; one client per service.
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AdminService } from "../gen/cohort/v1/admin_pb";
import { AgentService } from "../gen/cohort/v1/agent_pb";
import { GpuService } from "../gen/cohort/v1/gpu_pb";
import { SweepService } from "../gen/cohort/v1/sweep_service_pb";
import { TelemetryService } from "../gen/cohort/v1/telemetry_pb";
import { TrainingService } from "../gen/cohort/v1/training_service_pb";
import { BadRequestSchema, ErrorInfoSchema } from "../gen/google/rpc/error_details_pb";
import { token } from "./token";

const withToken: Interceptor = (next) => async (req) => {
  const secret = token.get();
  if (secret) req.header.set("authorization", `Bearer ${secret}`);
  return next(req);
};

const transport = createGrpcWebTransport({
  baseUrl: typeof window === "undefined" ? "http://127.0.0.1:50051" : window.location.origin,
  interceptors: [withToken],
});

export const api = {
  training: createClient(TrainingService, transport),
  gpu: createClient(GpuService, transport),
  telemetry: createClient(TelemetryService, transport),
  admin: createClient(AdminService, transport),
  agent: createClient(AgentService, transport),
  sweep: createClient(SweepService, transport),
};

/** A call's failure as a person reads it, with the server's field errors. */
export interface Failure {
  code: Code;
  message: string;
  reason?: string;
  /** Field path (as the server names it, e.g. `config.model.k`) → why. */
  fields: Record<string, string>;
}

export function failure(err: unknown): Failure {
  const e = ConnectError.from(err);
  const fields: Record<string, string> = {};
  for (const bad of e.findDetails(BadRequestSchema)) {
    for (const v of bad.fieldViolations) fields[v.field] = v.description;
  }
  const info = e.findDetails(ErrorInfoSchema)[0];
  return { code: e.code, message: e.rawMessage, reason: info?.reason, fields };
}

/** Whether a stream ended because the page stopped it (not an error). */
export function aborted(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Canceled;
}

export { Code };
