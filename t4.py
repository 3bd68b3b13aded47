exec(open("/tmp/xe/t1.py").read().split("def f(x)")[0])
def f(x):
    loss, g = ce(x)
    return loss.sum() * 3, g
x = torch.randn(4, 5, requires_grad=True)
cf = torch.compile(f, fullgraph=True, backend="aot_eager")
l, g = cf(x)
l.backward(); print(x.grad[0], g[0])
